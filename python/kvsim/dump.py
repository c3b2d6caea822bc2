"""Record attention traces (kvsim trace schema v1) from a Hugging Face causal LM on a GPU.

    python3 -m kvsim.dump --model meta-llama/Llama-3.2-1B --prompts prompts.jsonl --out t.h5 \\
        [--max-new-tokens 64] [--no-generate] [--prompt-tokens N] \\
        [--dtype auto|float16|bfloat16|float32] [--attn] [--store-dtype float16|float32] \\
        [--device cuda|cpu|auto]

Needs PyTorch and transformers with AttentionInterface (recent 4.x or 5.x); they are imported
only when a dump starts, so this module imports without them.

prompts.jsonl holds one JSON object per line: {"prompt": "text"} or {"ids": [1, 9038, ...]}
(token ids, e.g. exactly those `kvsim capture` used, or for a model converted with
kvsim.convert_llama2c, which has no HF tokenizer), with optional "max_new_tokens" and "id";
or {"context": ..., "question": ...} (or "questions": [...], a sequence each) with optional
"answer" (fed instead of generating) and "spans" in character offsets: the trace then has
spans context, question, answer and the line's, question_len and, for several questions,
context_group (kvsim.prompts; docs/traces.md).

For each prompt (cut to its first --prompt-tokens tokens when given): greedy generation
(unless --no-generate), then ONE forward pass over the full
sequence (prompt + generated) with use_cache=False. A custom attention function registered as
"kvsim_dump" sees every layer's post-RoPE query [1, n_heads, T, hd] and key/value
[1, n_kv_heads, T, hd] (before GQA repetition), writes them to the trace (as float16 by
default) and hands the computation to the built-in "sdpa" (or the model's eager) attention.
With --attn it also stores the causal softmax of scaling * q.k, computed in float32 (with the
layer's logit softcap and sliding window), packed as the schema says; that costs T*T per head.
attn_scale is the attention modules' `scaling`; layers with a sliding window (Mistral, Gemma-2)
or a logit softcap (Gemma-2) get the per-layer attrs sliding_window / logit_softcap. A sliding
window W means position t sees positions t-W < i <= t (HF's convention). The RoPE attrs
(rope_theta, rope_scaling_type and _factor, rotary_dims, rope_pairing) come from the config
when it has rope_theta (rope_attrs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .prompts import DumpError, encode, marks, prompt_ids, read_prompts  # noqa: F401  (kvsim.dump's API)

ATTN_NAME = "kvsim_dump"


def load_pieces(model_dir):
    """tokenizer_pieces.json written by kvsim.convert_llama2c, if the model directory has one."""
    path = os.path.join(model_dir, "tokenizer_pieces.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)["pieces"]


def token_texts(ids, tokenizer=None, pieces=None):
    """One display string per token: llama2.c pieces, SentencePiece pieces with the word marker
    as a space, or each id decoded alone (byte-level BPE); None when nothing is known."""
    if pieces is not None:
        return [pieces[i] if 0 <= i < len(pieces) else f"<{i}>" for i in ids]
    if tokenizer is None:
        return None
    toks = tokenizer.convert_ids_to_tokens(list(ids))
    sample = tokenizer.convert_ids_to_tokens(list(range(min(len(tokenizer), 4096))))
    if any(isinstance(t, str) and "\u2581" in t for t in sample):
        return ["" if t is None else t.replace("\u2581", " ") for t in toks]
    return [tokenizer.decode([i]) for i in ids]


def _require():
    try:
        import torch
        import transformers
        from transformers import AttentionInterface  # noqa: F401  (only checks it exists)
    except ImportError as e:
        raise DumpError("needs PyTorch and Hugging Face transformers with "
                        f"AttentionInterface (4.5x or 5.x) on this machine: {e}") from None
    return torch, transformers


class _Recorder:
    """State shared with the registered attention function (registration is global)."""

    def __init__(self):
        self.inner = "sdpa"
        self.seq = None
        self._eager = {}

    def start(self, seq, meta, attn):
        self.seq, self.meta, self.attn = seq, meta, attn
        self.done = set()

    def stop(self):
        self.seq = None

    def inner_fn(self, module):
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        if self.inner != "eager":
            return ALL_ATTENTION_FUNCTIONS[self.inner]
        mod = type(module).__module__
        if mod not in self._eager:
            fn = getattr(sys.modules.get(mod), "eager_attention_forward", None)
            if fn is None:
                from transformers.models.llama.modeling_llama import eager_attention_forward as fn
            self._eager[mod] = fn
        return self._eager[mod]

    def observe(self, module, query, key, value, scaling, kwargs):
        m = self.meta
        layer = getattr(module, "layer_idx", None)
        if layer is None:
            raise DumpError(f"{type(module).__name__} has no layer_idx; cannot tell layers apart")
        layer = int(layer)
        if layer in self.done:
            raise DumpError(f"layer {layer} ran twice in one forward pass")
        n = self.seq.n_tokens
        want_q = (1, m["n_heads"], n, m["head_dim"])
        want_kv = (1, m["n_kv_heads"], n, m["head_dim"])
        if tuple(query.shape) != want_q or tuple(key.shape) != want_kv \
                or tuple(value.shape) != want_kv:
            raise DumpError(f"layer {layer}: q/k/v shapes {tuple(query.shape)}/{tuple(key.shape)}/"
                            f"{tuple(value.shape)} differ from the config's {want_q}/{want_kv}")
        scale = float(scaling if scaling is not None else getattr(module, "scaling",
                                                                  m["head_dim"] ** -0.5))
        if abs(scale - m["attn_scale"]) > 1e-6 * m["attn_scale"]:
            raise DumpError(f"layer {layer} scales scores by {scale}, the trace says "
                            f"{m['attn_scale']}; per-layer scales are not in schema v1")
        window = kwargs["sliding_window"] if "sliding_window" in kwargs \
            else getattr(module, "sliding_window", None)
        cap = kwargs["softcap"] if "softcap" in kwargs \
            else getattr(module, "attn_logit_softcapping", None)
        q, k, v = query[0], key[0], value[0]
        attn = packed_attention(q, k, scale, window, cap) if self.attn else None
        self.seq.write_layer(layer, q=q.float().cpu().numpy(), k=k.float().cpu().numpy(),
                             v=v.float().cpu().numpy(), attn=attn,
                             sliding_window=int(window) if window else None,
                             logit_softcap=float(cap) if cap else None)
        self.done.add(layer)


_REC = _Recorder()


def kvsim_dump_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                         **kwargs):
    """The function registered as "kvsim_dump": record (when a dump pass is on), then delegate."""
    if _REC.seq is not None:
        _REC.observe(module, query, key, value, scaling, kwargs)
    return _REC.inner_fn(module)(module, query, key, value, attention_mask, scaling=scaling,
                                 dropout=dropout, **kwargs)


def packed_attention(q, k, scale, sliding_window=None, softcap=None):
    """q [H, T, hd], k [G, T, hd] (torch) -> numpy float32 [H, T(T+1)/2], one head at a time."""
    import numpy as np
    import torch
    H, T, _ = q.shape
    rep = H // k.shape[0]
    i = torch.arange(T, device=q.device)
    allowed = i[None, :] <= i[:, None]
    if sliding_window:
        allowed &= i[None, :] > i[:, None] - int(sliding_window)
    tril = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    out = np.empty((H, T * (T + 1) // 2), dtype=np.float32)
    for h in range(H):
        s = (q[h].float() @ k[h // rep].float().T) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        p = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)
        out[h] = p[tril].cpu().numpy()
    return out


def register(inner="sdpa"):
    """Register "kvsim_dump" (and its mask function, where transformers has that interface)."""
    _require()
    from transformers import AttentionInterface
    if inner not in ("sdpa", "eager"):
        raise DumpError(f"--inner must be sdpa or eager, not {inner!r}")
    _REC.inner = inner
    AttentionInterface.register(ATTN_NAME, kvsim_dump_attention)
    try:  # transformers >= 4.53 builds masks per implementation; unregistered means no mask
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError:  # older: non-sdpa names get a 4-D additive mask, which both inners take
        return
    AttentionMaskInterface.register(ATTN_NAME, AttentionMaskInterface._global_mapping[inner])


def _text_config(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def choose_inner(config, requested="auto"):
    """sdpa, except eager for logit-softcapped models (sdpa ignores the softcap)."""
    if requested != "auto":
        return requested
    return "eager" if getattr(_text_config(config), "attn_logit_softcapping", None) else "sdpa"


def set_attn_implementation(model, name):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)  # may only warn for models it cannot switch
    if model.config._attn_implementation != name:
        model.config._attn_implementation = name


def model_meta(model):
    """Root attrs of the trace from the model's config and attention modules."""
    cfg = _text_config(model.config)
    n_heads = int(cfg.num_attention_heads)
    n_kv = int(getattr(cfg, "num_key_value_heads", None) or n_heads)
    hd = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads)
    scales = (float(m.scaling) for m in model.modules()
              if hasattr(m, "layer_idx") and isinstance(getattr(m, "scaling", None), (int, float)))
    scale = next(scales, hd ** -0.5)
    return {"n_layers": int(cfg.num_hidden_layers), "n_heads": n_heads, "n_kv_heads": n_kv,
            "head_dim": hd, "attn_scale": scale, "rope": rope_attrs(cfg, hd)}


def rope_attrs(cfg, head_dim):
    """The trace's RoPE attrs from a HF text config, as far as it declares them: rope_theta,
    rope_scaling's type and factor ("none" and 1 when the config has no rope_scaling),
    rotary_dims (partial_rotary_factor * head_dim, else head_dim) and the pairing
    (transformers' Llama-family models rotate halves: rotate_half)."""
    out = {}
    params = getattr(cfg, "rope_parameters", None)  # transformers 5 moves them here
    params = params if isinstance(params, dict) else {}
    theta = getattr(cfg, "rope_theta", None) or params.get("rope_theta")
    if theta is None:
        return out  # not a RoPE model, or one this dumper cannot read
    scaling = getattr(cfg, "rope_scaling", None)
    scaling = scaling if isinstance(scaling, dict) else params
    kind = scaling.get("rope_type") or scaling.get("type")
    scaled = kind not in (None, "default")
    out["rope_theta"] = float(theta)
    out["rope_scaling_type"] = str(kind) if scaled else "none"
    out["rope_scaling_factor"] = float(scaling.get("factor") or 1.0) if scaled else 1.0
    partial = float(getattr(cfg, "partial_rotary_factor", 1.0) or 1.0)
    dims = int(head_dim * partial)
    if dims >= 2 and dims % 2 == 0:
        out["rotary_dims"] = dims
    out["rope_pairing"] = "half"
    return out


def _greedy(model, ids, n_new):
    import torch
    if n_new <= 0:
        return list(ids)
    dev = next(model.parameters()).device
    inp = torch.tensor([ids], device=dev)
    gc = model.generation_config
    pad = gc.pad_token_id
    if pad is None:
        eos = gc.eos_token_id
        pad = (eos[0] if isinstance(eos, (list, tuple)) else eos) if eos is not None else 0
    with torch.no_grad():
        out = model.generate(input_ids=inp, attention_mask=torch.ones_like(inp), do_sample=False,
                             num_beams=1, max_new_tokens=n_new, pad_token_id=pad)
    return out[0].tolist()


def dump_model(model, prompts, out, *, model_name, tokenizer=None, pieces=None,
               max_new_tokens=64, generate=True, attn=False, store_dtype="float16",
               inner="auto", prompt_tokens=None, log=None):
    """Trace every prompt (dicts as read_prompts or encode return) of an already loaded model
    to out. Every prompt is encoded before the first forward pass, so a bad line stops the
    dump before any work."""
    torch, _ = _require()
    from . import __version__
    from .tracefile import TraceWriter
    plans = [encode(p, tokenizer, prompt_tokens) for p in prompts]
    register(choose_inner(model.config, inner))
    set_attn_implementation(model, ATTN_NAME)
    model.eval()
    meta = model_meta(model)
    dev = next(model.parameters()).device
    with TraceWriter(out, model=model_name, source="hf-dump", dtype=store_dtype,
                     tool=f"kvsim-dump {__version__}", **meta) as w:
        for p in plans:
            ids = p["ids"]
            n_new = max_new_tokens if p["max_new_tokens"] is None else p["max_new_tokens"]
            if p["forced"]:  # a reference answer: fed as it is, nothing generated
                full = ids + p["forced"]
            else:
                full = _greedy(model, ids, n_new if generate else 0)
            seq = w.begin_sequence(full, prompt_len=len(ids),
                                   token_text=token_texts(full, tokenizer, pieces),
                                   **marks(p, len(full)))
            _REC.start(seq, meta, attn)
            try:
                with torch.no_grad():
                    model.base_model(input_ids=torch.tensor([full], device=dev), use_cache=False)
            finally:
                _REC.stop()
            if len(_REC.done) != meta["n_layers"]:
                raise DumpError(f"the model ran the kvsim_dump attention in {len(_REC.done)} of "
                                f"{meta['n_layers']} layers; does it use transformers' "
                                "AttentionInterface in every layer?")
            seq.finish()
            if log:
                log(f"seq {seq.index} (prompt {p['id']}): {len(ids)} prompt + {len(full) - len(ids)} "
                    f"{'given answer' if p['forced'] else 'generated'} tokens")
    return meta


def load_model(name, dtype="auto", device="cuda", inner="auto"):
    torch, transformers = _require()
    from transformers import AutoConfig, AutoModelForCausalLM
    inner = choose_inner(AutoConfig.from_pretrained(name), inner)
    register(inner)
    dtypes = {"auto": "auto", "float16": torch.float16, "bfloat16": torch.bfloat16,
              "float32": torch.float32}
    version = tuple(int(x) for x in transformers.__version__.split(".")[:2] if x.isdigit())
    kw = {"attn_implementation": ATTN_NAME,
          ("dtype" if version >= (4, 56) else "torch_dtype"): dtypes[dtype]}
    if device == "auto":
        kw["device_map"] = "auto"
    model = AutoModelForCausalLM.from_pretrained(name, **kw)
    if device != "auto":
        model.to(device)
    return model.eval(), inner


def load_tokenizer(name, model, pieces):
    """The --tokenizer, else the model's own; None for a converted llama2.c model (it has
    pieces, no tokenizer) or a model without one ({"ids": [...]} prompts still work)."""
    if not name and pieces is not None:
        return None
    try:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(name or model)
    except Exception as e:
        if name:
            raise DumpError(f"{name}: cannot load tokenizer: {e}") from None
    return None


def build_parser():
    """The command line of python3 -m kvsim.dump (docs/traces.md's commands are checked against it)."""
    ap = argparse.ArgumentParser(prog="python3 -m kvsim.dump", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="HF model name or local directory")
    ap.add_argument("--prompts", required=True,
                    help='JSONL: {"prompt": ...}, {"ids": [...]} or {"context": ..., "question": ...}')
    ap.add_argument("--out", required=True, help="trace file to write (.h5)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--no-generate", action="store_true", help="trace the prompts (and given answers) only")
    ap.add_argument("--prompt-tokens", type=int, metavar="N",
                    help="cut each prompt to its first N tokens (a shorter prompt is an error)")
    ap.add_argument("--dtype", default="auto", choices=["auto", "float16", "bfloat16", "float32"],
                    help="dtype to run the model in")
    ap.add_argument("--store-dtype", default="float16", choices=["float16", "float32"])
    ap.add_argument("--attn", action="store_true", help="also store attention probabilities")
    ap.add_argument("--device", default=None, help="cuda (default when available), cpu or auto")
    ap.add_argument("--inner", default="auto", choices=["auto", "sdpa", "eager"],
                    help="attention that does the computation (auto: eager if softcapped)")
    ap.add_argument("--tokenizer", help="tokenizer name or directory (default: --model)")
    ap.add_argument("--model-name", help="name stored in the trace (default: from --model)")
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        if args.max_new_tokens < 0:
            raise DumpError("--max-new-tokens must be >= 0")
        if args.prompt_tokens is not None and args.prompt_tokens < 1:
            raise DumpError("--prompt-tokens must be >= 1")
        out_dir = os.path.dirname(os.path.abspath(args.out))
        if not os.path.isdir(out_dir):
            raise DumpError(f"{args.out}: directory {out_dir} does not exist")
        prompts = read_prompts(args.prompts)
        torch, _ = _require()
        is_dir = os.path.isdir(args.model)
        pieces = load_pieces(args.model) if is_dir else None
        tokenizer = load_tokenizer(args.tokenizer, args.model, pieces)
        # every line's problems (spans that cover no token, ...) before the model loads
        prompts = [encode(p, tokenizer, args.prompt_tokens) for p in prompts]
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        model, inner = load_model(args.model, args.dtype, device, args.inner)
        name = args.model_name or (os.path.basename(os.path.normpath(args.model)) if is_dir
                                   else args.model)
        meta = dump_model(model, prompts, args.out, model_name=name, tokenizer=tokenizer,
                          pieces=pieces, max_new_tokens=args.max_new_tokens,
                          generate=not args.no_generate, attn=args.attn,
                          store_dtype=args.store_dtype, inner=inner, prompt_tokens=args.prompt_tokens,
                          log=lambda s: print(s, file=sys.stderr))
    except (DumpError, OSError, ValueError) as e:
        print(f"kvsim.dump: {e}", file=sys.stderr)
        return 2
    print(f"{args.out}: {len(prompts)} sequences, {meta['n_layers']} layers, {meta['n_heads']} "
          f"heads ({meta['n_kv_heads']} kv), head_dim {meta['head_dim']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
