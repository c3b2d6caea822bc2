"""kvsim from Python: replay attention traces through KV-cache eviction policies, and the
trace-file writer, the GPU dumper and checkpoint converters.

Replay, sweep, analysis and planning (the compiled module kvsim._kvsim, built by kvsim's CMake
project, or by `pip install .`; numpy arrays in and out). sweep, replay, analyze and plan
return pandas DataFrames with the CLI's CSV columns when pandas imports, dicts with
as_frame=False (or after kvsim.set_dataframes(False)) or without pandas:
  kvsim.open(path) -> Trace        metadata, tokens, token text, attention rows of a head
  kvsim.replay(trace, policy, budget, **params)    per layer; the dict adds per-step records
  kvsim.replay_rows(attention, policy, budget)     the same on rows given as a numpy array
  kvsim.sweep(trace, policies, budgets)            the policies x budgets table
  kvsim.eval(trace, model, policies, budgets)      the closed loop, as `kvsim eval --json`
  kvsim.proxy_table(result)                        eval()'s proxy table (PROXY_MEASURES x PROXY_TARGETS)
  kvsim.SWEEP_COLUMNS, kvsim.REPLAY_COLUMNS        `kvsim sweep --csv`'s, `kvsim replay --csv`'s columns
  kvsim.analyze(trace) / kvsim.analyze_rows(rows)  persistence of importance
  kvsim.need(trace, p=(0.9, 0.95, 0.99))           the attention need per layer (analyze --need)
  kvsim.plan(model, gpu, ...)                      capacity planning, as `kvsim plan --json`
  kvsim.plan_text(model, gpu, ...)                 the same plan as the table `kvsim plan` prints
  kvsim.policies(), kvsim.data_dir(), kvsim.bundled_trace(), kvsim.InputError (a ValueError)
  kvsim.register_policy(name, cls)                 a policy written in Python (kvsim.PolicyError)
  kvsim.gui(trace, policy=..., budget=..., ...)    kvsim-gui's window in this process (built with Qt)
These names load the compiled module on first use; `import kvsim` alone imports nothing heavy,
so the pure-Python tools below work on machines that only have the .py files.

Submodules (import them explicitly):
  kvsim.tracefile        write/read kvsim trace schema v1 (HDF5, needs numpy + h5py)
  kvsim.dump             record q/k/v from a Hugging Face model (needs torch + transformers)
  kvsim.convert_llama2c  llama2.c checkpoint -> Hugging Face Llama directory (numpy only)
"""

__version__ = "0.1.0"

_NATIVE_NAMES = ("open", "Trace", "InputError", "replay", "replay_rows", "sweep", "eval", "analyze",
                 "analyze_rows", "need", "plan", "plan_text", "policies", "register_policy", "PolicyError", "data_dir",
                 "bundled_trace", "SWEEP_COLUMNS", "REPLAY_COLUMNS", "set_dataframes", "gui", "proxy_table",
                 "PROXY_MEASURES", "PROXY_TARGETS")


def __getattr__(name):
    if name in _NATIVE_NAMES:
        from . import _api  # raises ImportError saying how to get the compiled module

        return getattr(_api, name)
    raise AttributeError(f"module 'kvsim' has no attribute {name!r}")


def __dir__():
    import importlib.util

    native = importlib.util.find_spec("kvsim._kvsim") is not None  # without importing it
    return sorted(set(globals()) | (set(_NATIVE_NAMES) if native else set()))
