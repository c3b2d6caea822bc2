"""The GPU dumper's transformers path against kvsim capture, on stories15M.

    dump_vs_capture.py KVSIM_EXE WORK_DIR

stories15M is captured by `kvsim capture` (the llama2.c runner in C++), converted to a Hugging
Face Llama directory (kvsim.convert_llama2c) and traced on the same tokens by
`python3 -m kvsim.dump` (transformers, on CUDA when available, in float32). Both store q, k
and v as float16; every value must agree within float16 rounding (two float16 steps at the
value's magnitude, plus 1e-3 for values near zero, where the two float32 computations differ
by more than a step). HF's q and k come in the converter's half-split RoPE order, mapped back
to llama2.c's interleaved order before comparing (dot products do not depend on the order).
Then `kvsim validate` and `kvsim info` read the dumped trace, as docs/traces.md checks one.

Exit code 77 (ctest SKIP_RETURN_CODE), with the reason, where torch or transformers does not
import or the model is not cached (scripts/fetch-model.sh)."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
SRC_PYTHON = os.path.normpath(os.path.join(HERE, "..", "..", "python"))


def skip_reason():
    try:
        import torch  # noqa: F401
        from transformers import AttentionInterface, LlamaForCausalLM  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        return f"torch and transformers (with AttentionInterface) do not import here: {type(e).__name__}: {e}"
    return None


def model_dir():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("KVSIM_MODEL_DIR") or os.path.join(cache, "kvsim", "models")


def llama2c_order(x):
    """[..., head_dim] from HF's half-split RoPE order back to llama2.c's interleaved pairs."""
    hd = x.shape[-1]
    return x.reshape(*x.shape[:-1], 2, hd // 2).swapaxes(-1, -2).reshape(x.shape)


def within_float16(a, b):
    """|a - b| <= two float16 steps at max(|a|, |b|) + 1e-3, element-wise; the worst excess."""
    a, b = a.astype(np.float32), b.astype(np.float32)
    step = np.spacing(np.maximum(np.abs(a), np.abs(b)).astype(np.float16)).astype(np.float32)
    excess = np.abs(a - b) - (2 * step + 1e-3)
    return float(excess.max()) if excess.size else 0.0


def run(args, env=None):
    print("$ " + " ".join(args), flush=True)
    r = subprocess.run(args, capture_output=True, text=True, env=env)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def main():
    exe, work = sys.argv[1], os.path.abspath(sys.argv[2])
    reason = skip_reason()
    models = model_dir()
    if reason is None and not os.path.isfile(os.path.join(models, "stories15M.bin")):
        reason = f"{models}/stories15M.bin is not there (scripts/fetch-model.sh fetches it)"
    if reason:
        print(f"SKIP: the dumper's transformers path against kvsim capture: {reason}")
        return SKIP
    sys.path.insert(0, SRC_PYTHON)
    from kvsim import tracefile

    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model = os.path.join(models, "stories15M.bin")
    tokenizer = os.path.join(models, "tokenizer.bin")
    captured = os.path.join(work, "capture.h5")
    run([exe, "capture", "--model", model, "--tokenizer", tokenizer, "--prompt", "Once upon a time, there was a fox",
         "--prompt", "Tom and his dog Max went to the park", "--tokens", "96", "--continue-after-eos", "--out",
         captured])

    hf = os.path.join(work, "stories15M-hf")
    env = dict(os.environ, PYTHONPATH=SRC_PYTHON)
    run([sys.executable, "-m", "kvsim.convert_llama2c", model, hf, "--tokenizer", tokenizer], env=env)
    prompts = os.path.join(work, "prompts.jsonl")
    with tracefile.TraceReader(captured) as c, open(prompts, "w", encoding="utf-8") as f:
        for i in range(c.n_seqs):
            f.write(json.dumps({"ids": [int(t) for t in c.tokens(i)]}) + "\n")
    dumped = os.path.join(work, "dump.h5")
    run([sys.executable, "-m", "kvsim.dump", "--model", hf, "--prompts", prompts, "--out", dumped,
         "--no-generate", "--dtype", "float32"], env=env)

    worst = -np.inf
    with tracefile.TraceReader(captured) as c, tracefile.TraceReader(dumped) as d:
        for key in ("n_layers", "n_heads", "n_kv_heads", "head_dim"):
            assert c.meta[key] == d.meta[key], (key, c.meta[key], d.meta[key])
        assert abs(c.meta["attn_scale"] - d.meta["attn_scale"]) < 1e-6, (c.meta["attn_scale"], d.meta["attn_scale"])
        assert c.n_seqs == d.n_seqs == 2
        for i in range(c.n_seqs):
            np.testing.assert_array_equal(c.tokens(i), d.tokens(i))
            assert list(c.token_text(i)) == list(d.token_text(i)), f"sequence {i}: token text differs"
            for layer in range(c.meta["n_layers"]):
                cl, dl = c.layer(i, layer), d.layer(i, layer)
                for name in ("q", "k", "v"):
                    ours, theirs = cl[name][()], dl[name][()]
                    assert ours.dtype == theirs.dtype == np.float16, (name, ours.dtype, theirs.dtype)
                    assert ours.shape == theirs.shape, (name, ours.shape, theirs.shape)
                    if name != "v":
                        theirs = llama2c_order(theirs)
                    excess = within_float16(ours, theirs)
                    worst = max(worst, excess)
                    if excess > 0:
                        raise SystemExit(f"sequence {i}, layer {layer}, {name}: differs by {excess:g} beyond "
                                         "float16 rounding")
    print(f"q, k, v of 2 sequences x 6 layers agree within float16 rounding (worst margin {-worst:.2e})")
    run([exe, "validate", dumped])
    info = run([exe, "info", dumped])
    assert "6 layers x 6 heads, 6 kv heads (MHA), head_dim 48" in info, info
    return 0


if __name__ == "__main__":
    sys.exit(main())
