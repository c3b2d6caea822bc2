"""A small float64 numpy Llama forward with either RoPE convention, for the converter tests.

rope_llama2c transcribes llama2.c run.c (rotate the interleaved pairs (2i, 2i+1) of each head);
rope_hf transcribes HF Llama's apply_rotary_pos_emb (rotate_half: pairs (i, i + hs/2)).
Weights are a dict: embed [V, D], layers: list of dicts wq wk wv wo rms_att rms_ffn w1 w2 w3,
rms_final [D], wcls [V, D].
"""

import numpy as np


def rmsnorm(x, w, eps=1e-5):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope_llama2c(x, head_size, theta=10000.0):
    """x [T, n*hs]: run.c's loop over i = 0, 2, 4, ... of the whole vector."""
    out = x.copy()
    pos = np.arange(x.shape[0], dtype=np.float64)
    for i in range(0, x.shape[1], 2):
        freq = 1.0 / theta ** ((i % head_size) / head_size)
        c, s = np.cos(pos * freq), np.sin(pos * freq)
        v0, v1 = x[:, i], x[:, i + 1]
        out[:, i] = v0 * c - v1 * s
        out[:, i + 1] = v0 * s + v1 * c
    return out


def rope_hf(x, head_size, theta=10000.0):
    """x [T, n*hs]: q * cos + rotate_half(q) * sin with emb = cat(freqs, freqs)."""
    T = x.shape[0]
    inv_freq = 1.0 / theta ** (np.arange(0, head_size, 2, dtype=np.float64) / head_size)
    freqs = np.arange(T, dtype=np.float64)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]
    xh = x.reshape(T, -1, head_size)
    x1, x2 = xh[..., :head_size // 2], xh[..., head_size // 2:]
    rot = np.concatenate([-x2, x1], axis=-1)
    return (xh * cos + rot * sin).reshape(T, -1)


def forward(w, tokens, n_heads, n_kv_heads, rope):
    """Return (logits [T, V], per-layer dicts with post-RoPE q [H, T, hs], k [G, T, hs], probs)."""
    x = w["embed"][np.asarray(tokens)].astype(np.float64)
    T, dim = x.shape
    hs = dim // n_heads
    rep = n_heads // n_kv_heads
    causal = np.tril(np.ones((T, T), dtype=bool))
    record = []
    for lw in w["layers"]:
        h = rmsnorm(x, lw["rms_att"])
        q = rope(h @ lw["wq"].T, hs).reshape(T, n_heads, hs).transpose(1, 0, 2)
        k = rope(h @ lw["wk"].T, hs).reshape(T, n_kv_heads, hs).transpose(1, 0, 2)
        v = (h @ lw["wv"].T).reshape(T, n_kv_heads, hs).transpose(1, 0, 2)
        kk, vv = np.repeat(k, rep, axis=0), np.repeat(v, rep, axis=0)
        s = np.where(causal, q @ kk.transpose(0, 2, 1) / np.sqrt(hs), -np.inf)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        o = (p @ vv).transpose(1, 0, 2).reshape(T, dim)
        x = x + o @ lw["wo"].T
        h = rmsnorm(x, lw["rms_ffn"])
        a, b = h @ lw["w1"].T, h @ lw["w3"].T
        x = x + (a / (1.0 + np.exp(-a)) * b) @ lw["w2"].T
        record.append({"q": q, "k": k, "probs": p})
    return rmsnorm(x, w["rms_final"]) @ w["wcls"].T, record


def weights_from_llama2c(lw, n_layers, shared):
    """From llama2.c-layout arrays (as read_checkpoint returns or a test builds)."""
    keys = ["wq", "wk", "wv", "wo", "rms_att", "rms_ffn", "w1", "w2", "w3"]
    return {"embed": np.asarray(lw["token_embedding"], np.float64),
            "layers": [{k: np.asarray(lw[k][l], np.float64) for k in keys} for l in range(n_layers)],
            "rms_final": np.asarray(lw["rms_final"], np.float64),
            "wcls": np.asarray(lw["token_embedding"] if shared else lw["wcls"], np.float64)}


def weights_from_hf(t, n_layers, tied):
    """From an HF Llama state dict (name -> array)."""
    names = {"wq": "self_attn.q_proj", "wk": "self_attn.k_proj", "wv": "self_attn.v_proj",
             "wo": "self_attn.o_proj", "rms_att": "input_layernorm",
             "rms_ffn": "post_attention_layernorm", "w1": "mlp.gate_proj", "w2": "mlp.down_proj",
             "w3": "mlp.up_proj"}
    f = lambda name: np.asarray(t[name], np.float64)  # noqa: E731
    return {"embed": f("model.embed_tokens.weight"),
            "layers": [{k: f(f"model.layers.{l}.{v}.weight") for k, v in names.items()}
                       for l in range(n_layers)],
            "rms_final": f("model.norm.weight"),
            "wcls": f("model.embed_tokens.weight" if tied else "lm_head.weight")}


def write_llama2c_checkpoint(path, rng, dim=16, hidden=24, n_layers=2, n_heads=4, n_kv_heads=2,
                             vocab=11, seq_len=8, shared=True, scale=0.5):
    """Write a random legacy (version-0) llama2.c checkpoint; return its llama2.c-layout arrays."""
    hs = dim // n_heads
    kv = n_kv_heads * hs
    L = n_layers
    r = lambda *shape: (rng.standard_normal(shape) * scale).astype(np.float32)  # noqa: E731
    w = {"token_embedding": r(vocab, dim), "rms_att": 1 + r(L, dim), "wq": r(L, dim, dim),
         "wk": r(L, kv, dim), "wv": r(L, kv, dim), "wo": r(L, dim, dim), "rms_ffn": 1 + r(L, dim),
         "w1": r(L, hidden, dim), "w2": r(L, dim, hidden), "w3": r(L, hidden, dim),
         "rms_final": 1 + r(dim)}
    freqs = 1.0 / 10000.0 ** (np.arange(0, hs, 2) / hs)
    angles = np.outer(np.arange(seq_len), freqs).astype(np.float32)
    if not shared:
        w["wcls"] = r(vocab, dim)
    with open(path, "wb") as f:
        np.array([dim, hidden, n_layers, n_heads, n_kv_heads, vocab if shared else -vocab, seq_len],
                 dtype="<i4").tofile(f)
        for name in ["token_embedding", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2",
                     "w3", "rms_final"]:
            w[name].astype("<f4").tofile(f)
        np.cos(angles).astype("<f4").tofile(f)
        np.sin(angles).astype("<f4").tofile(f)
        if not shared:
            w["wcls"].astype("<f4").tofile(f)
    return w


def write_llama2c_tokenizer(path, pieces, scores=None, max_len=None):
    """Write a llama2.c tokenizer.bin: int32 max_token_length, then (float score, int32 len, bytes)."""
    enc = [p.encode("utf-8") for p in pieces]
    with open(path, "wb") as f:
        np.array([max_len or max(len(b) for b in enc)], dtype="<i4").tofile(f)
        for i, b in enumerate(enc):
            np.array([scores[i] if scores else -float(i)], dtype="<f4").tofile(f)
            np.array([len(b)], dtype="<i4").tofile(f)
            f.write(b)
