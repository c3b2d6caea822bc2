"""kvsim's replay, sweep, analysis and planning from Python (the public names are re-exported
by the kvsim package: kvsim.open, kvsim.replay, ...).

Everything runs in the compiled module kvsim._kvsim (the same C++ libraries as the `kvsim`
CLI, so the numbers are the CLI's bit for bit). sweep, replay, analyze and plan return a
pandas DataFrame with the columns of the CLI's CSV (plan: of its JSON rows) when pandas
imports; as_frame=False (or kvsim.set_dataframes(False) for the session) returns dicts, with
numbers as numpy arrays and tables as dicts of equal-length columns, and the per-step records.
Bad input raises kvsim.InputError, a ValueError whose message is the CLI's one-line message.
All replays are teacher-forced: rows come from the full-cache run, so the drift a compressed
model would accumulate is not modelled.
"""

from __future__ import annotations

import io
import os

try:
    from . import _kvsim as _native
except ImportError as _error:  # pragma: no cover - depends on the installation
    raise ImportError(
        "kvsim's replay functions need the compiled module kvsim._kvsim, which could not be imported "
        f"({_error}). Build kvsim with CMake (pybind11-dev and python3-dev installed; -DKVSIM_PYTHON=ON) "
        "and put <build>/python on PYTHONPATH, or install kvsim (cmake --install, or the Debian package). "
        "The pure-Python tools (kvsim.tracefile, kvsim.dump, kvsim.convert_llama2c) work without it."
    ) from _error

import numpy as np

InputError = _native.InputError
PolicyError = _native.PolicyError

# The grids sweep() and eval() run when none is given: the CLI's (the library owns them).
DEFAULT_SWEEP_POLICIES = _native.DEFAULT_SWEEP_POLICIES
DEFAULT_SWEEP_BUDGETS = _native.DEFAULT_SWEEP_BUDGETS
DEFAULT_EVAL_POLICIES = _native.DEFAULT_EVAL_POLICIES
DEFAULT_EVAL_BUDGETS = _native.DEFAULT_EVAL_BUDGETS
DEFAULT_RECALL_DISTANCE = _native.DEFAULT_RECALL_DISTANCE  # eval()'s, kvsim eval --recall-distance's
# The proxy table's rows (replay measures) and columns (closed-loop targets), in the table's order.
PROXY_MEASURES = _native.PROXY_MEASURES
PROXY_TARGETS = _native.PROXY_TARGETS
# analyze()'s defaults (lags, topk, min_positions, max_steps, samples): the CLI's.
_ANALYZE_DEFAULTS = _native._AnalyzeOptions()

# The columns of `kvsim sweep --csv`, in order (sweep() returns them, its dict also "label"):
# the library's one list of them (kvsim/replay/sweep_table.hpp).
SWEEP_COLUMNS = _native.SWEEP_COLUMNS
# The columns of `kvsim replay --csv` (one row per layer, then "all"), as the library writes them.
REPLAY_COLUMNS = _native.REPLAY_COLUMNS

_dataframes = None  # None: DataFrames when pandas imports


def set_dataframes(on=True):
    """sweep, replay, analyze and plan return pandas DataFrames (on; the default when pandas
    imports) or dicts (off), for calls that do not pass as_frame. None restores the default."""
    global _dataframes
    _dataframes = None if on is None else bool(on)


def _pandas(as_frame):
    """The pandas module when the result is to be a DataFrame, else None."""
    if as_frame is None:
        as_frame = _dataframes
    if as_frame is False:
        return None
    try:
        import pandas
    except ImportError:
        if as_frame:
            raise ImportError("kvsim: DataFrames need pandas (Debian: python3-pandas); as_frame=False "
                              "returns dicts") from None
        return None
    return pandas


def _text(value) -> str:
    if isinstance(value, bool):
        raise InputError(f"{value!r} is not a number or a name")
    return str(value)


def _comma_list(value, what) -> list:
    """'a,b' or ['a', 'b'] (or a single number) -> ['a', 'b']."""
    if value is None:
        return []
    if isinstance(value, (str, int, float)):
        items = str(value).split(",")
    else:
        items = [_text(v) for v in value]
    items = [item.strip() for item in items if str(item).strip()]
    if not items:
        raise InputError(f"--{what}: nothing given")
    return items


# What the compiled module's integers hold: C int and int64_t.
_INT_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


def _int(value, what, low=0, high=_INT_MAX) -> int:
    """int(value), refused with one line naming `what` outside [low, high] (Python's integers
    have no bound; the compiled module's do)."""
    number = int(value)
    if not low <= number <= high:
        raise InputError(f"{what}: {number} is out of range ({low} to {high})")
    return number


def _path(value, what):
    """A path (str, bytes or os.PathLike) as the compiled module takes it; one with a NUL
    character is refused, since the C library would read the path only up to it."""
    path = os.fspath(value)
    if ("\0" if isinstance(path, str) else b"\0") in path:
        raise InputError(f"{what}: {path!r} contains a NUL character")
    return path


def _protect(value) -> list:
    """--protect's rules: None, 'context:4', ['context:4', 'question:2'] or {'context': 4}."""
    if value is None:
        return []
    if isinstance(value, dict):
        return [f"{_text(kind)}:{_text(tokens)}" for kind, tokens in value.items()]
    if isinstance(value, str):
        return [value]
    return [_text(rule) for rule in value]


def _indices(value, what) -> list:
    if value is None:
        return []
    if isinstance(value, (int, np.integer)):
        return [_int(value, f"--{what}")]
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    out = []
    for v in value:
        try:
            number = int(v)
        except (TypeError, ValueError):
            raise InputError(f"--{what}: '{v}' is not an index") from None
        out.append(_int(number, f"--{what}"))
    return out


def _params(params, kwargs) -> list:
    """Policy parameters from a dict and keyword arguments -> [(key, value text)]."""
    merged = dict(params or {})
    merged.update(kwargs)
    return [(str(k), _text(v)) for k, v in merged.items()]


def _budget(value) -> str:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, str):
        return value
    raise InputError(f"--budget: {value!r} is not a token count (64) or a share ('20%')")


def _ratios(value, budgets, option, many=True) -> list:
    """compression_ratio= as the budgets 'ratio R' that --compression-ratio gives (kvpress's
    ratio; docs/semantics.md, section 2). A float is written with at most 6 decimals."""
    if budgets is not None:
        raise InputError(f"--compression-ratio and --{option} each set the budget: give one")
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if isinstance(value, str):
        items = value.split(",")
    out = []
    for item in items:
        if isinstance(item, (float, int, np.floating, np.integer)) and not isinstance(item, bool):
            item = f"{float(item):.6f}".rstrip("0").rstrip(".")
        out.append("ratio " + str(item).strip())
    if not many and len(out) != 1:
        raise InputError("--compression-ratio: replay takes one ratio (sweep takes a list)")
    return out


def _replay_options(mode, aggregate, rows, seqs, layers, output_error, quant, layer_budget, threads,
                    question=None, compress_every=None, page=0, page_score="mean", head_budget="uniform",
                    head_floor=0.2, share="none", share_score="mean", threshold=None, threshold_window=None,
                    pool=0, protect=None, span_step=None):
    o = _native._ReplayOptions()
    o.protect = _protect(protect)
    o.span_step = "" if span_step is None else str(span_step)
    o.pool = _int(pool, "--pool", 0)
    o.page = _int(page, "--page", 0, _INT64_MAX)
    o.page_score = str(page_score)
    o.mode = str(mode)
    o.question = "" if question is None else str(question)
    o.compress_every = "" if compress_every is None else str(compress_every)
    o.threshold = "" if threshold is None else repr(float(threshold))
    o.window = "" if threshold_window is None else str(threshold_window)
    o.aggregate = str(aggregate)
    o.rows = str(rows)
    if output_error is True:
        output_error = "on"
    elif output_error is False:
        output_error = "off"
    o.output_error = str(output_error)
    o.sequences = _indices(seqs, "seqs")
    o.layers = _indices(layers, "layers")
    if quant is not None and not isinstance(quant, str):
        quant = ",".join(_text(q) for q in quant)
    o.quant = quant or ""
    if not isinstance(layer_budget, str):
        layer_budget = ",".join(repr(float(w)) for w in layer_budget)
    o.layer_budget = layer_budget
    o.head_budget = str(head_budget)
    o.head_floor = float(head_floor)
    o.share = str(share)
    o.share_score = str(share_score)
    o.threads = _int(threads, "--threads")
    return o


def _trace(trace) -> "Trace":
    if isinstance(trace, Trace):
        return trace
    if isinstance(trace, (str, os.PathLike)):
        return Trace(trace)
    raise TypeError(f"expected a kvsim.Trace or a path, got {type(trace).__name__}")


def _preview(text, count) -> str:
    """The prompt as `kvsim info` shows it: on one line, leading spaces removed."""
    out = "".join(text[:count])
    for c in "\n\t\r":
        out = out.replace(c, " ")
    return out.lstrip(" ")


class Trace(_native.Trace):
    """An open trace file (schema v1). Opening checks the whole structure; data is read on demand.

    t.meta                      model, source, n_layers, n_heads, n_kv_heads, head_dim, attn_scale, ...
    t.n_sequences, len(t)       sequences in the file
    t.sequence(i)               n_tokens, prompt_len, has_token_text, per-layer forms
    t.tokens(i)                 int32 [n_tokens]
    t.token_text(i)             list of str (empty when the trace has none)
    t.attention(i, layer, head) float32 [n, n] causal softmax rows (zeros above the diagonal)
    t.tensor(i, layer, 'q'|'k'|'v', head)  float32 [n, head_dim]
    t.info()                    what `kvsim info --json` writes
    """

    def __init__(self, path):
        super().__init__(_path(path, "trace"))

    def __len__(self):
        return self.n_sequences

    def __repr__(self):
        if self.closed:
            return "<kvsim.Trace (closed)>"
        m = self.meta
        return (f"<kvsim.Trace {self.path!r}: {m['model']}, {m['n_layers']} layers x {m['n_heads']} heads "
                f"({m['n_kv_heads']} kv), {self.n_sequences} sequences>")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def attention(self, seq, layer, head=None, *, packed=False, rows="auto"):
        """Attention rows as the replay engine sees them: head an int -> [n, n] (row t holds
        a_t[0..t], zeros above the diagonal), a list -> [len, n, n], None -> every query head
        [n_heads, n, n]. packed=True: row t at offset t(t+1)/2 of [n(n+1)/2] per head.
        rows: 'auto' (stored attn when present, else recomputed from q and k), 'attn' or 'qk'."""
        one = isinstance(head, (int, np.integer))
        heads = [] if head is None else ([_int(head, "head")] if one else [_int(h, "head") for h in head])
        if head is not None and not heads:
            raise InputError("no head given")
        out = self._attention(_int(seq, "seq"), _int(layer, "layer"), heads, bool(packed), str(rows))
        return out[0] if one else out

    def tensor(self, seq, layer, name, head):
        """One head of q (a query head), k or v (a kv head): float32 [n_tokens, head_dim]."""
        return self._tensor(_int(seq, "seq"), _int(layer, "layer"), str(name), _int(head, "head"))

    def sequence(self, seq):
        """Sequence `seq`: index, n_tokens, prompt_len, has_token_text, layers (their forms)."""
        return super().sequence(_int(seq, "seq"))

    def tokens(self, seq):
        """The token ids of sequence `seq`: int32 [n_tokens]."""
        return super().tokens(_int(seq, "seq"))

    def token_text(self, seq):
        """The text of each token of sequence `seq` (empty when the trace has none)."""
        return super().token_text(_int(seq, "seq"))

    def info(self) -> dict:
        """What `kvsim info --json` writes."""
        m = self.meta
        sequences = []
        for i in range(self.n_sequences):
            s = self.sequence(i)
            text = self.token_text(i)
            sequences.append({"index": i, "n_tokens": s["n_tokens"], "prompt_len": s["prompt_len"],
                              "prompt_text": _preview(text, s["prompt_len"]) if text else "",
                              "layers": s["layers"]})
        out = {k: m[k] for k in ("file", "file_size", "model", "source", "created", "tool", "version",
                                 "n_layers", "n_heads", "n_kv_heads", "head_dim", "attn_scale")}
        out["sequences"] = sequences
        if "rope" in m:
            out["rope"] = m["rope"]
        return out


def open(path) -> Trace:  # noqa: A001 - kvsim.open reads like open()
    """Open a trace file (HDF5, schema v1)."""
    return Trace(path)


def policies() -> list:
    """Every policy: name, summary, grouping, budgeted, bound, selects, cross_layer, reads,
    layer_budget and head_floor (its own budget mechanisms, or None), kvpress (the press it
    ports as (class name, module name), names it also answers to, or None), python, params
    (with defaults)."""
    return _native.policies()


_POLICY_FLAGS = (("budgeted", True), ("needs_attention", True), ("needs_keys", False), ("needs_values", False),
                 ("needs_queries", False))
_PARAM_TYPES = ("integer", "real", "choice", "index_set")


def register_policy(name, cls):
    """Make the class `cls` a policy named `name` for replay, sweep, replay_rows and eval, as
    the built-in ones (docs/extending.md, "A policy in Python"). Each cache group gets its own
    instance, cls(**params), then:
      reset(ctx)                               ctx.n_tokens, budget, n_heads, layer, seed
      observe(step, cache, attention[, keys=, values=, queries=])
          cache: int32 [c] the cached positions, ascending, `step` last; attention: float32 [c]
          the group's renormalised row over them; keys, values: float32 [kv heads, c, head_dim]
          of those positions, queries: float32 [heads, head_dim] of `step` (when declared)
      evict(step, cache, excess, compress) -> the positions to evict (a list, an array or None);
          at least `excess` when it is positive
    Class attributes (optional): summary (str), grouping ('kv_head' or 'layer'), budgeted
    (True), needs_attention (True: False skips observe unless a tensor is needed), needs_keys,
    needs_values, needs_queries (False), params (dicts as kvsim.policies() lists them: name,
    type 'integer'|'real'|'choice'|'index_set', default, help, min, max, choices; each name
    once). Registering a name again replaces the class, except while a run using it (in
    another thread) has not finished; a built-in name is refused. An exception in the class,
    or a bad answer from evict, raises kvsim.PolicyError naming the policy, sequence, layer,
    kv head ('all kv heads' with grouping 'layer'), step and budget (B, tokens);
    KeyboardInterrupt and SystemExit pass unchanged. Instances must not share mutable state
    (then results do not depend on threads).
    """
    name = str(name)
    if not name or not all(c.isalnum() or c in "_-" for c in name):  # '.' would split params={'name.key': v}
        raise InputError(f"register_policy: policy name {name!r}: letters, digits, '_' and '-' only")
    for method in ("reset", "observe", "evict"):
        if not callable(getattr(cls, method, None)):
            raise InputError(f"register_policy: {name}: the class has no method {method}()")
    summary = getattr(cls, "summary", None) or (cls.__doc__ or "").strip().split("\n")[0]
    grouping = getattr(cls, "grouping", "kv_head")
    if grouping not in ("kv_head", "layer"):
        raise InputError(f"register_policy: {name}: grouping must be 'kv_head' or 'layer', not {grouping!r}")
    flags = []
    for flag, default in _POLICY_FLAGS:
        value = getattr(cls, flag, default)
        if not isinstance(value, (bool, np.bool_)):
            raise InputError(f"register_policy: {name}: {flag} must be True or False, not {value!r}")
        flags.append(bool(value))
    specs = []
    for spec in getattr(cls, "params", ()):
        if not isinstance(spec, dict) or "name" not in spec or spec.get("type", "integer") not in _PARAM_TYPES:
            raise InputError(f"register_policy: {name}: each of params is a dict with a name and a type in "
                             f"{', '.join(_PARAM_TYPES)}; got {spec!r}")
        if any(known["name"] == str(spec["name"]) for known in specs):
            raise InputError(f"register_policy: {name}: parameter {str(spec['name'])!r} is declared twice")
        default = spec.get("default")
        specs.append({"name": str(spec["name"]), "type": spec.get("type", "integer"),
                      "default": "" if default is None else _text(default), "help": str(spec.get("help", "")),
                      "min": float(spec.get("min", 0)), "max": float(spec.get("max", 1e18)),
                      "choices": [str(c) for c in spec.get("choices", ())]})
    _native._register_policy(name, cls, str(summary), grouping, flags, specs)


def gui(trace=None, **options):
    """Open kvsim-gui's window on `trace` (a kvsim.Trace or a path; None: no trace) in this
    process, so the policies kvsim.register_policy added are in its policy list, and return
    when the window is closed. options: kvsim-gui's command-line options as keywords (`kvsim-gui
    --help`), each given as --name-with-dashes: seq, layer, head, policy, budget (64 or '20%'),
    step, mode, page, page_score, question, compress_every, layer_budget, head_budget,
    head_floor, overview (what the overview colours by: 'retention_mean', 'occupancy_layer_union_mean',
    ...); screenshot='shot.png' saves the window once every view has caught up and quits,
    quit_after_ms=N quits N ms after they have (both for scripts and tests).

    Returns what the window showed at the end: policies (the policy list), policy (the one
    selected), label, seq, layer, head, step, n_tokens, budget (B of the shown layer),
    budget_text, mode, status (the controls' status line), message (the status bar), error
    (why the shown setting cannot run, e.g. the Python policy raised; '' if it ran), groups
    (the shown replay's cache groups, as replay()'s), mask (bool [step, position]: whether the
    shown head's cache held the position, what the heatmap draws) and exit_code. An option the
    window refuses raises kvsim.InputError; no display (DISPLAY unset, no QT_QPA_PLATFORM=
    offscreen), or kvsim built without Qt, RuntimeError."""
    args = []
    for name, value in options.items():
        if value is not None:
            option = "--" + name.replace("_", "-")
            args += [option, _path(_text(value), option)]  # each an argv string: no NUL
    if trace is not None:
        args += ["--", trace.path if isinstance(trace, Trace) else _path(trace, "trace")]
    if not hasattr(_native, "_gui"):
        raise RuntimeError("kvsim.gui: this kvsim was built without Qt 6 (Widgets and Charts), so without "
                           "kvsim-gui; rebuild it with Qt 6 installed (-DKVSIM_GUI=ON)")
    return _native._gui(args)


def data_dir() -> str:
    """The folder with kvsim's model and GPU cards and the bundled traces ($KVSIM_DATA_DIR,
    the source tree's data/ from a build tree, or the installation's share/kvsim)."""
    return _native.data_dir()


def bundled_trace() -> str:
    """Path of the bundled real trace (stories15M, 8 prompts x 256 tokens, q/k/v float16)."""
    return os.path.join(data_dir(), "traces", "stories15M-8x256.h5")


def replay(trace, policy, budget=None, *, compression_ratio=None, mode="stream", aggregate="mean", rows="auto", seqs=None, layers=None,
           output_error="auto", quant=None, layer_budget="uniform", head_budget="uniform", head_floor=0.2,
           threads=0, records=None, params=None, as_frame=None, question=None, compress_every=None, page=0,
           page_score="mean", share="none", share_score="mean", threshold=None, threshold_window=None, pool=0,
           protect=None, span_step=None, **policy_params):
    """Replay one policy at one budget over a trace (kvsim replay).

    trace: a kvsim.Trace or a path. budget: tokens (64) or a share of each sequence ('20%').
    compression_ratio (instead of budget; mode 'prefill'): kvpress's R, B = max(1, floor((1 - R)
    x the prompt)), the context's length with a question; results carry the budget 'ratio R'.
    policy: a kvsim name or the kvpress press it ports ('SnapKVPress', 'snapkv_press'); results
    carry the kvsim name.
    Policy parameters as keyword arguments (w=400, r=10) or params={'w': 400}.
    Options as the CLI's: mode 'stream'|'prefill', aggregate 'mean'|'max'|'sum',
    rows 'auto'|'attn'|'qk', seqs/layers (lists of indices), output_error 'auto'|'on'|'off',
    quant (one spec: 'flexgen4', 'kivi2', 'int8', ...), layer_budget ('uniform', 'persistence',
    'pyramid[:beta=20][:window=32]', 'cake[:tau1=1][:tau2=1][:window=32]' or one weight per layer),
    head_budget ('uniform', or 'adaptive': Ada-KV across a layer's kv heads, each keeping at least
    head_floor x B of its top scores), threads (as the CLI's --threads), question
    (mode 'prefill': the prompt's last N tokens, or 'auto'; the summary then has
    question_retention_* and answer_retention_*), compress_every (decode-time compression every
    N steps); docs/semantics.md, section 2. page (P: evict whole pages of P positions by the
    policy's scores, 0: single positions) and page_score ('mean'|'max', a page's score from
    its positions'). share ('none'; 'layer': a layer's kv heads keep one set, so an evicted
    position is freed from all of them; 'model': every layer of a sequence keeps one set of B;
    scoring policies only) and share_score ('mean'|'max'|'sum', how the scores of the caches
    that share a set combine per position).
    threshold (T) and threshold_window (W, default 128; --window, not a
    policy's window parameter): the threshold protocol
    (kvpress's DMSPress; scoring policies): at each eviction step every cached position outside
    the last W whose score is below T goes, and the budget caps nothing (it only sets the
    policy's own parameters); the occupancy columns report what stays.
    pool (N: the sequences, N at a time, share N x B per layer and kv head,
    the lowest scores across them going first; 0: every sequence alone).
    protect ('context:4', a list of such rules, or {'context': 4}; --protect): the first and
    last N positions of every span of that kind are never evicted once cached; they count
    toward B and the policy evicts among the other positions (traces with spans).
    span_step (--span-step): the step whose row the span metrics measure (default: the
    question's first row; docs/semantics.md, section 3).

    With pandas (and as_frame not False): a DataFrame, the table `kvsim replay --csv` writes
    (REPLAY_COLUMNS: one row per layer, then the row whose layer is "all").
    With as_frame=False: a dict, the summary (as a `kvsim sweep --csv` row: retention_mean,
    retention_p5, retention_min, output_error_*, occupancy_mean, occupancy_peak, evictions,
    samples, ...), 'layers' (columns per layer), and unless records=False 'groups':
    {(seq, layer, group): {'heads' int32 [h], 'steps' int64 [steps], 'retention' float32
    [h, steps], 'output_error' float32 [h, steps] or None, 'occupancy' int32 [steps],
    'eviction_step' int32 [positions] (-1: never evicted), 'evictions', 'budget', ...}}.
    Layer-wide policies (tova, scissorhands-xlayer) have one group 0 per layer.
    With pool > 0, or sequences sharing a context (a context_group, question='auto'),
    'per_sequence' (the DataFrame's attrs['per_sequence']): columns seq, pool, compressed_by
    (the sequence whose replay compressed the shared context; -1: none),
    budget_tokens_mean, retention_mean, retention_min, occupancy_mean, occupancy_peak, one
    entry per sequence (the tables `kvsim replay --pool N` and with shared contexts print).
    On a trace with spans, 'spans' (the DataFrame's attrs['spans']): one entry per span of each
    sequence with seq, name, kind, start, end, step, held_all, held_any, gone, mass, mass_held,
    answer_rows and answer_* of each measure (the replay JSON's cells[i].spans).
    """
    pandas = _pandas(as_frame)
    if pandas is not None and records:
        raise InputError("records=True: the per-step records come in the dict that as_frame=False returns")
    options = _replay_options(mode, aggregate, rows, seqs, layers, output_error, quant, layer_budget, threads,
                              question, compress_every, page, page_score, head_budget, head_floor, share,
                              share_score, threshold, threshold_window,
                              pool, protect, span_step)
    if compression_ratio is not None:
        budget = _ratios(compression_ratio, budget, "budget", many=False)[0]
    elif budget is None:
        raise InputError("--budget: give a budget (or compression_ratio)")
    out = _native._replay(_trace(trace), str(policy), _budget(budget), _params(params, policy_params), options,
                          pandas is None and records is not False)
    if pandas is None:
        return out
    layers = out["layers"]
    n = len(layers["layer"])
    columns = {}
    for name in REPLAY_COLUMNS:
        if name == "layer":
            columns[name] = [int(v) for v in layers["layer"]] + ["all"]
        elif name in layers:
            columns[name] = np.append(layers[name], out[name])
        else:
            columns[name] = [out[name]] * (n + 1)
    frame = pandas.DataFrame(columns)
    if "per_sequence" in out:
        frame.attrs["per_sequence"] = pandas.DataFrame(out["per_sequence"])
    if "spans" in out:
        frame.attrs["spans"] = pandas.DataFrame(out["spans"])
    return frame


def sweep(trace, policies=None, budgets=None, *, compression_ratio=None, mode="stream", aggregate="mean", rows="auto", seqs=None,
          layers=None, output_error="auto", quant=None, layer_budget="uniform", head_budget="uniform",
          head_floor=0.2, threads=0, params=None, as_frame=None, question=None, compress_every=None, page=0,
          page_score="mean", share="none", share_score="mean", threshold=None, threshold_window=None, pool=0,
          protect=None, span_step=None, **policy_params):
    """The policies x budgets grid (kvsim sweep): with pandas a DataFrame with the columns of
    `kvsim sweep --csv` (SWEEP_COLUMNS) in its order, one row per line, NaN where the CSV is
    empty. With as_frame=False a dict of those columns (strings as lists, numbers as numpy
    arrays) plus 'label' (policy and changed parameters).

    policies, budgets: lists or comma-separated strings (defaults as the CLI's); a policy by its
    kvsim name or its kvpress press's. compression_ratio (instead of budgets; mode 'prefill'):
    kvpress's ratios, one or a list, as replay()'s (budget column 'ratio R'). Parameters:
    key=value goes to every chosen policy that takes it; params={'scissorhands.w': 200} to one.
    quant: specs added to the unquantized grid (a 'quant' column tells them apart).
    question, compress_every: as replay()'s; with a question the question_retention_* and
    answer_retention_* columns follow the others. page, page_score: as replay()'s; with page > 0
    the table ends with a 'page' column, as the CSV. share, share_score, threshold,
    threshold_window, pool, protect, span_step: as replay()'s (each sequence's part of a pool
    is in `kvsim sweep --pool N --json`). On a trace with spans the span_<kind>_<measure>
    columns come last, as in the CSV.
    """
    names = _comma_list(policies if policies is not None else DEFAULT_SWEEP_POLICIES, "policies")
    if compression_ratio is not None:
        grid = _ratios(compression_ratio, budgets, "budgets")
    else:
        grid = _comma_list(budgets if budgets is not None else DEFAULT_SWEEP_BUDGETS, "budgets")
    pandas = _pandas(as_frame)
    options = _replay_options(mode, aggregate, rows, seqs, layers, output_error, quant, layer_budget, threads,
                              question, compress_every, page, page_score, head_budget, head_floor, share,
                              share_score, threshold, threshold_window,
                              pool, protect, span_step)
    out = _native._sweep(_trace(trace), names, grid, _params(params, policy_params), options)
    if pandas is None:
        return out
    return pandas.DataFrame({name: values for name, values in out.items() if name != "label"})


def replay_rows(attention, policy, budget, *, n_kv_heads=None, mode="stream", prompt_len=0, aggregate="mean",
                values=None, origin=(0, 0, 0), params=None, question=0, compress_every=0, **policy_params) -> dict:
    """Replay one policy on attention rows you computed yourself, no trace file.

    attention: the rows of one layer, float (converted to float32; read in place when it is
    float32 and C-contiguous; a broadcast view, whose elements share memory, is refused rather
    than expanded): [n_heads, n, n] full causal matrices (row t holds a_t[0..t],
    zeros above the diagonal), or packed [n_heads, n(n+1)/2] (row t at offset t(t+1)/2), or
    one packed head [n(n+1)/2]. Rows must be probabilities summing to 1 within 1e-3 (they are
    renormalised as the trace reader renormalises stored attn). n_kv_heads: query heads are
    grouped as a trace's (head h uses kv head h // (n_heads // n_kv_heads)); default n_heads.
    values: optional float [n_kv_heads, n, head_dim] for the output error. budget: tokens or '20%'.
    mode 'prefill' needs prompt_len. origin: (sequence, layer, first kv head) the rows come from,
    so seeded policies (random) draw what replay() draws for those cache groups. question (with
    mode 'prefill': the prompt's last N rows are the question) and compress_every (0: the
    mode's rule) as replay()'s; each group then says its question_steps.

    Returns retention (and output_error) float32 [n_heads, steps] in the array's head order,
    their summary (retention_mean, retention_p5, retention_min, ...), and 'groups': one dict
    per cache group as replay()'s groups.
    """
    n_kv_heads = 0 if n_kv_heads is None else _int(n_kv_heads, "n_kv_heads", 1)  # 0: the number of heads
    return _native._replay_rows(attention, str(policy), _budget(budget), n_kv_heads, _params(params, policy_params),
                                str(mode), _int(prompt_len, "--prompt-len", 0, _INT64_MAX),
                                _int(question, "--question", 0, _INT64_MAX),
                                _int(compress_every, "--compress-every", 0, _INT64_MAX), str(aggregate), values,
                                [_int(v, "origin") for v in origin])


def eval(trace, model, policies=None, budgets=None, *, compression_ratio=None, seqs=None, tokens=0, aggregate="mean", threads=0,  # noqa: A001
         layer_budget="uniform", question=None, prompt_len=0, recall_distance=DEFAULT_RECALL_DISTANCE, params=None,
         protect=None, **policy_params) -> dict:
    """The closed loop (kvsim eval --trace): the llama2.c checkpoint `model` (a path, e.g.
    ~/.cache/kvsim/models/stories15M.bin) runs over the trace's token sequences with every
    head attending only to its cache, the policies (built-in or kvsim.register_policy's)
    deciding; beside it the teacher-forced replay on the same tokens. Returns the document
    `kvsim eval --json` writes, as a dict: full_cache, cells (per policy and budget:
    closed_loop perplexity, perplexity_increase, top1_agreement, ...; replay retention and
    output error), per_sequence (with compressed_by where questions share a context: the
    sequence whose runs compressed it), shared_contexts (if any), correlations. tokens: the
    first N of each sequence (0: all).
    layer_budget: as kvsim eval --layer-budget; question: N or "auto" (--question), with
    prompt_len (0: the trace's prompt_len). recall_distance: D of the recall tokens
    (--recall-distance): recall_tokens, full_cache's recall_perplexity, and each cell's
    closed_loop recall_top1_agreement and recall_perplexity (None when there is none).
    proxy_table: the Spearman correlation of each replay measure with each closed-loop target
    per group of cells (None: n/a); proxy_table(result) gives it as a table.
    protect: as replay()'s (--protect), for the closed loop and its replay alike.
    compression_ratio (instead of budgets; needs question): kvpress's ratios, as sweep()'s, of
    each context's length.
    """
    names = _comma_list(policies if policies is not None else DEFAULT_EVAL_POLICIES, "policies")
    if compression_ratio is not None:
        grid = _ratios(compression_ratio, budgets, "budgets")
    else:
        grid = _comma_list(budgets if budgets is not None else DEFAULT_EVAL_BUDGETS, "budgets")
    return _native._eval(_trace(trace), _path(model, "model"), names, grid, _params(params, policy_params),
                         _indices(seqs, "seqs"), _int(tokens, "--tokens"), str(aggregate), _int(threads, "--threads"),
                         str(layer_budget), "" if question is None else str(question),
                         _int(prompt_len, "--prompt-len", 0, _INT64_MAX),
                         _int(recall_distance, "--recall-distance", 1, _INT64_MAX), _protect(protect))


def proxy_table(result, *, as_frame=None):
    """eval()'s proxy table as the text table prints it: one row per (group, replay measure),
    columns over, points, measure, then one per closed-loop target (PROXY_TARGETS), NaN for
    n/a (docs/semantics.md, section 6). A DataFrame with pandas (and as_frame not False), else
    a dict of lists."""
    table = result["proxy_table"]
    out = {"over": [], "points": [], "measure": []}
    out.update({target: [] for target in table["targets"]})
    for group in table["groups"]:
        for measure in table["measures"]:
            out["over"].append(group["over"])
            out["points"].append(group["points"])
            out["measure"].append(measure)
            for target in table["targets"]:
                rho = group["spearman"][measure][target]
                out[target].append(float("nan") if rho is None else rho)
    pandas = _pandas(as_frame)
    return out if pandas is None else pandas.DataFrame(out)


def _analyze_options(lags, topk, min_positions, max_steps, samples, correlations=True):
    o = _native._AnalyzeOptions()
    o.lags = [_int(v, "--lags", 1, 2**30) for v in _comma_list(lags, "lags")]
    o.top_k = _text(topk)
    o.min_positions = _int(min_positions, "--min-positions", 2, _INT64_MAX)
    o.max_steps = _int(max_steps, "--max-steps", 1, _INT64_MAX)
    o.samples = _int(samples, "--samples", 0, 64)
    o.correlations = bool(correlations)
    return o


def analyze(trace, *, seqs=None, layers=None, lags=tuple(_ANALYZE_DEFAULTS.lags), topk=_ANALYZE_DEFAULTS.top_k,
            min_positions=_ANALYZE_DEFAULTS.min_positions, max_steps=_ANALYZE_DEFAULTS.max_steps,
            samples=_ANALYZE_DEFAULTS.samples, rows="auto", threads=0, as_frame=None):
    """Persistence of importance (kvsim analyze), on a trace or path; a numpy array of one
    layer's rows goes to analyze_rows() (which returns a dict).

    With pandas: a DataFrame, the table `kvsim analyze --csv` writes (its columns; a row per
    layer and head, then per layer with head "mean", then layer "all", head "mean").
    With as_frame=False a dict: 'heads' (per layer and head: those columns), 'layer_means'
    (head -1), 'overall' (one dict; layer and head -1), 'cross_layer' (layer_a, layer_b,
    spearman, spearman_normalised), 'per_sequence' (per sequence, layer and head: early, late,
    persistent, persistence, ever_pivotal, repeat_share, spearman_lag*, topk_recall_lag*,
    repeats), 'persistence_weights' (the --layer-budget persistence schedule over the analysed
    layers), 'lags', 'sequences', 'layers'. NaN marks undefined values (the CSV's empty cells).
    """
    if isinstance(trace, np.ndarray):
        return analyze_rows(trace, lags=lags, topk=topk, min_positions=min_positions, max_steps=max_steps,
                            samples=samples)
    pandas = _pandas(as_frame)
    options = _analyze_options(lags, topk, min_positions, max_steps, samples)
    out = _native._analyze(_trace(trace), options, str(rows), _indices(seqs, "seqs"), _indices(layers, "layers"),
                           _int(threads, "--threads"))
    if pandas is None:
        return out
    tables = [out["heads"], out["layer_means"], {k: [v] for k, v in out["overall"].items()}]
    columns = {}
    for name in out["heads"]:
        values = [v for table in tables for v in table[name]]
        if name in ("layer", "head"):
            marker = "all" if name == "layer" else "mean"
            values = [marker if v == -1 else int(v) for v in values]
        columns[name] = values
    return pandas.DataFrame(columns)


def analyze_rows(attention, *, lags=tuple(_ANALYZE_DEFAULTS.lags), topk=_ANALYZE_DEFAULTS.top_k,
                 min_positions=_ANALYZE_DEFAULTS.min_positions, max_steps=_ANALYZE_DEFAULTS.max_steps,
                 samples=_ANALYZE_DEFAULTS.samples) -> dict:
    """analyze() on one layer's rows given as a numpy array (shapes as replay_rows): per head
    ('heads' columns), and the head-averaged importance per position (accumulated and
    normalised)."""
    options = _analyze_options(lags, topk, min_positions, max_steps, samples)
    return _native._analyze_rows(attention, options)


def need(trace, *, p=(0.9, 0.95, 0.99), seqs=None, layers=None, rows="auto", threads=0, as_frame=None):
    """The attention need (kvsim analyze --need) over every step of a trace or path: the fewest
    positions whose attention sums to at least p, per query head and step.

    With pandas: a DataFrame of the table kvsim analyze --need prints (layer, p, count, mean,
    p95, max over every sequence, head and step). With as_frame=False a dict: 'layers' (those
    columns), 'step_mean' (per row of 'layers' the mean over sequences and heads at each step),
    'p', 'budget' (per mass the share holding the peak on every sequence, as the sweep's need
    rows write it), 'peak' (per mass each sequence's largest need), 'sequences', 'tokens'.
    """
    pandas = _pandas(as_frame)
    masses = [float(v) for v in _comma_list(p, "p")]
    out = _native._need(_trace(trace), masses, str(rows), _indices(seqs, "seqs"), _indices(layers, "layers"),
                        _int(threads, "--threads"))
    if pandas is None:
        return out
    frame = pandas.DataFrame(out["layers"])
    frame.attrs["budget"] = dict(zip(out["p"], out["budget"]))
    return frame


def plan(model, gpu, *, gpus=1, weight_dtype="bf16", kv_dtype="fp16", kv_quant=None, utilization=0.90,
         reserve="2GiB", block_size=16, context=None, budget=None, sweep=None, target=None, cards=None,
         layer_budget="uniform", head_budget="uniform", layout="per-head", as_frame=None):
    """Capacity planning (kvsim plan). With pandas: a DataFrame of the plan's rows, one per
    policy and budget, with the keys of the rows of `kvsim plan --json` as columns, in the
    order of the table `kvsim plan` prints (policy, budget, quant, the target's metric,
    kv_bytes_per_token, kv_bytes_per_sequence, blocks_per_sequence, max_sequences, gain, the
    step; each one's details after it; the plan has no CSV); the rest of that document is in
    the frame's .attrs. With as_frame=False: the
    document `kvsim plan --json` writes, as a dict with its 'rows' as a list of dicts.

    model, gpu: card names (kvsim plan --list), display names, Hugging Face ids or card files;
    gpu also a size ('80GB', '80GiB'). context: tokens (4096), '3072+1024', a list of lengths
    (a mix) or a CSV file; default the model's maximum. budget: tokens or shares, a list or
    '20%,512'. sweep: a sweep CSV file or kvsim.sweep()'s result (DataFrame or dict); target: 'retention>=0.95'
    (the default with a sweep), 'output_error<=0.05', ... kv_quant: 'flexgen4', 'kivi2', specs.
    cards: the folder holding models/ and gpus/ (default data_dir()). layer_budget ('uniform',
    'pyramid[...]' or one weight per layer) and head_budget ('uniform', 'adaptive'): as the sweep's.
    layout ('per-head', 'dense', 'paged-layer', 'paged-model'; with a sweep): the cache layout
    whose peak occupancy each sequence holds, as kvsim plan --layout.
    """
    pandas = _pandas(as_frame)
    out = _native._plan(_plan_args(model, gpu, gpus, weight_dtype, kv_dtype, kv_quant, utilization, reserve,
                                   block_size, context, budget, sweep, target, cards,
                                   layer_budget, head_budget, layout))
    if pandas is None:
        return out
    frame = pandas.DataFrame(out["rows"])
    frame.attrs.update({k: v for k, v in out.items() if k != "rows"})
    return frame


def plan_text(model, gpu, *, gpus=1, weight_dtype="bf16", kv_dtype="fp16", kv_quant=None, utilization=0.90,
              reserve="2GiB", block_size=16, context=None, budget=None, sweep=None, target=None, cards=None,
              layer_budget="uniform", head_budget="uniform", layout="per-head") -> str:
    """The same plan as the table `kvsim plan` prints (print(kvsim.plan_text(...)))."""
    return _native._plan_text(_plan_args(model, gpu, gpus, weight_dtype, kv_dtype, kv_quant, utilization, reserve,
                                         block_size, context, budget, sweep, target, cards,
                                         layer_budget, head_budget, layout))


def _plan_args(model, gpu, gpus, weight_dtype, kv_dtype, kv_quant, utilization, reserve, block_size, context, budget,
               sweep, target, cards, layer_budget="uniform", head_budget="uniform", layout="per-head"):
    a = _native._PlanArgs()
    a.layer_budget = str(layer_budget)
    a.layout = str(layout)
    a.head_budget = str(head_budget)
    a.model = _path(_text(model), "--model")  # a card name or a card file
    a.gpu = _path(_text(gpu), "--gpu")
    a.gpus = _int(gpus, "--gpus", 1)
    a.weight_dtype = str(weight_dtype)
    a.kv_dtype = str(kv_dtype)
    a.kv_quant = ",".join(_comma_list(kv_quant, "kv-quant")) if kv_quant is not None else ""
    a.utilization = float(utilization)
    a.reserve = _text(reserve)
    a.block_size = _int(block_size, "--block-size", 1)
    if context is None:
        pass
    elif isinstance(context, (int, np.integer)):
        a.context = str(int(context))
    elif isinstance(context, (str, os.PathLike)):
        a.context = _path(context, "--context")
    else:
        lengths = [int(c) for c in context]
        if not lengths:
            raise InputError("--context: no lengths given")
        a.context_text = "\n".join(str(c) for c in lengths) + "\n"
        a.context = "contexts"
    if budget is not None:
        a.budget = ",".join(_comma_list(budget, "budget"))
    if sweep is not None:
        if isinstance(sweep, (str, os.PathLike)):
            path = _path(sweep, "--sweep")
            try:
                with io.open(path, encoding="utf-8") as f:
                    a.sweep_text = f.read()
            except OSError:
                raise InputError(f"{path}: cannot read the sweep") from None
            a.sweep_name = path
            if not a.sweep_text:
                raise InputError(f"{path}: the sweep is empty")
        elif hasattr(sweep, "columns") and hasattr(sweep, "to_dict"):  # a DataFrame
            a.set_sweep_columns({str(c): sweep[c].tolist() for c in sweep.columns})
        else:
            a.set_sweep_columns(dict(sweep))
    if target is not None:
        a.target = str(target)
    if cards is not None:
        a.cards = _path(cards, "--cards")
    return a
