"""Convert a llama2.c checkpoint (legacy version-0 .bin, e.g. stories15M.bin) to a Hugging Face
Llama directory, with numpy alone:

    python3 -m kvsim.convert_llama2c stories15M.bin out/stories15M [--tokenizer tokenizer.bin]

writes out/stories15M/config.json (LlamaForCausalLM, float32) and model.safetensors, and with
--tokenizer also tokenizer_pieces.json (the llama2.c vocabulary: pieces and scores).

No Hugging Face tokenizer is written (tokenizer.bin holds pieces and scores, not the
SentencePiece model). Give the dumper token ids instead, which is also how a trace can be made
of exactly the tokens `kvsim capture` used:

    {"ids": [1, 9038, 2501, 263, 931], "max_new_tokens": 32}

`python3 -m kvsim.dump` finds tokenizer_pieces.json in the model directory and uses it for
token_text (llama2.c pieces, spaces as " ").

Checkpoint layout (llama2.c export.py legacy_export / run.c): 7 int32 (dim, hidden_dim,
n_layers, n_heads, n_kv_heads, vocab_size, seq_len; vocab_size < 0 means an unshared classifier
follows), then float32 token_embedding [vocab, dim], rms_att [L, dim], wq [L, dim, dim],
wk [L, kv_dim, dim], wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn [L, dim],
w1 [L, hidden, dim], w2 [L, dim, hidden], w3 [L, hidden, dim], rms_final [dim],
freq_cis_real and freq_cis_imag [seq_len * head_size / 2] each (skipped), then wcls [vocab, dim].

RoPE: llama2.c rotates the interleaved pairs (2i, 2i+1) of each head, HF Llama the half-split
pairs (i, i + head_size/2), both with frequency theta^(-2i/head_size). So the rows of wq (per
query head) and wk (per kv head) are permuted: HF row i <- llama2.c row 2i, HF row
i + head_size/2 <- llama2.c row 2i + 1 (what HF's convert_llama_weights_to_hf.py does).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np

_HEADER = struct.Struct("<7i")
_ST_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8,
              "I16": np.int16, "I32": np.int32, "I64": np.int64, "U8": np.uint8, "BOOL": np.bool_}


_ST_NAMES = {np.dtype(v).str[1:]: k for k, v in _ST_DTYPES.items()}


class ConvertError(Exception):
    """A checkpoint or tokenizer file that cannot be converted; str() is one line."""


def read_checkpoint(path):
    """Return (params, weights): params a dict, weights llama2.c-layout arrays (memory-mapped)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise ConvertError(f"{path}: too short for a llama2.c header")
    if struct.unpack("<I", head[:4])[0] == 0x616B3432:
        raise ConvertError(f"{path}: a versioned llama2.c checkpoint (magic 'ak42'); only the "
                           "legacy version-0 format (export.py --version 0) is supported")
    dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len = _HEADER.unpack(head)
    shared = vocab > 0
    vocab = abs(vocab)
    if min(dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len) <= 0 \
            or dim % n_heads or n_heads % n_kv_heads or (dim // n_heads) % 2:
        raise ConvertError(f"{path}: implausible header dim={dim} hidden_dim={hidden} "
                           f"n_layers={n_layers} n_heads={n_heads} n_kv_heads={n_kv_heads} "
                           f"vocab_size={vocab} seq_len={seq_len}")
    hs = dim // n_heads
    kv_dim = n_kv_heads * hs
    L = n_layers
    shapes = [("token_embedding", (vocab, dim)), ("rms_att", (L, dim)), ("wq", (L, dim, dim)),
              ("wk", (L, kv_dim, dim)), ("wv", (L, kv_dim, dim)), ("wo", (L, dim, dim)),
              ("rms_ffn", (L, dim)), ("w1", (L, hidden, dim)), ("w2", (L, dim, hidden)),
              ("w3", (L, hidden, dim)), ("rms_final", (dim,)),
              ("freq_cis_real", (seq_len * hs // 2,)), ("freq_cis_imag", (seq_len * hs // 2,))]
    if not shared:
        shapes.append(("wcls", (vocab, dim)))
    n_floats = sum(int(np.prod(s)) for _, s in shapes)
    expected = _HEADER.size + 4 * n_floats
    if size != expected:
        raise ConvertError(f"{path}: {size} bytes, but the header (dim={dim}, n_layers={n_layers}, "
                           f"vocab_size={vocab}, {'shared' if shared else 'unshared'} classifier) "
                           f"implies {expected}")
    data = np.memmap(path, dtype="<f4", mode="r", offset=_HEADER.size, shape=(n_floats,))
    weights, pos = {}, 0
    for name, shape in shapes:
        count = int(np.prod(shape))
        weights[name] = data[pos:pos + count].reshape(shape)
        pos += count
    params = dict(dim=dim, hidden_dim=hidden, n_layers=n_layers, n_heads=n_heads,
                  n_kv_heads=n_kv_heads, vocab_size=vocab, seq_len=seq_len, head_size=hs,
                  shared_classifier=shared)
    return params, weights


def permute_rope(w, n_heads):
    """Rows of wq/wk from interleaved to half-split RoPE order (a view where numpy can)."""
    out_dim, in_dim = w.shape
    hs = out_dim // n_heads
    return w.reshape(n_heads, hs // 2, 2, in_dim).transpose(0, 2, 1, 3).reshape(out_dim, in_dim)


def hf_config(p):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": p["dim"],
        "intermediate_size": p["hidden_dim"],
        "num_hidden_layers": p["n_layers"],
        "num_attention_heads": p["n_heads"],
        "num_key_value_heads": p["n_kv_heads"],
        "head_dim": p["head_size"],
        "vocab_size": p["vocab_size"],
        "max_position_embeddings": p["seq_len"],
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": p["shared_classifier"],
        "bos_token_id": 1,
        "eos_token_id": 2,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": "float32",
    }


def hf_tensors(p, w):
    """HF Llama state dict (name -> array) from llama2.c weights; wq/wk rows permuted."""
    t = {"model.embed_tokens.weight": w["token_embedding"]}
    for l in range(p["n_layers"]):
        pre = f"model.layers.{l}."
        t[pre + "input_layernorm.weight"] = w["rms_att"][l]
        t[pre + "self_attn.q_proj.weight"] = permute_rope(w["wq"][l], p["n_heads"])
        t[pre + "self_attn.k_proj.weight"] = permute_rope(w["wk"][l], p["n_kv_heads"])
        t[pre + "self_attn.v_proj.weight"] = w["wv"][l]
        t[pre + "self_attn.o_proj.weight"] = w["wo"][l]
        t[pre + "post_attention_layernorm.weight"] = w["rms_ffn"][l]
        t[pre + "mlp.gate_proj.weight"] = w["w1"][l]
        t[pre + "mlp.down_proj.weight"] = w["w2"][l]
        t[pre + "mlp.up_proj.weight"] = w["w3"][l]
    t["model.norm.weight"] = w["rms_final"]
    if not p["shared_classifier"]:
        t["lm_head.weight"] = w["wcls"]
    return t


def write_safetensors(path, tensors, metadata=None):
    """Write name -> array as a .safetensors file (8-byte LE header size, JSON header, data)."""
    header, offset = {}, 0
    for name, a in tensors.items():
        code = _ST_NAMES.get(np.dtype(a.dtype).str[1:])
        if code is None:
            raise ValueError(f"safetensors: unsupported dtype {a.dtype} for {name}")
        nbytes = int(a.size) * a.dtype.itemsize
        header[name] = {"dtype": code, "shape": [int(d) for d in a.shape],
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header["__metadata__"] = dict(metadata or {"format": "pt"})
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for a in tensors.values():
            np.ascontiguousarray(a, dtype=np.dtype(a.dtype).newbyteorder("<")).tofile(f)


def read_safetensors(path):
    """Read a .safetensors file into name -> numpy array (BF16 widened to float32)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        begin, end = spec["data_offsets"]
        raw = data[begin:end]
        if spec["dtype"] == "BF16":
            a = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = raw.view(np.dtype(_ST_DTYPES[spec["dtype"]]).newbyteorder("<"))
        out[name] = np.array(a.reshape(spec["shape"]))
    return out


def read_tokenizer(path, vocab_size):
    """llama2.c tokenizer.bin -> (max_token_length, pieces, scores)."""
    with open(path, "rb") as f:
        buf = f.read()
    try:
        (max_len,), pos = struct.unpack_from("<i", buf, 0), 4
        pieces, scores = [], []
        for _ in range(vocab_size):
            score, n = struct.unpack_from("<fi", buf, pos)
            pos += 8
            if n < 0 or pos + n > len(buf):
                raise struct.error("bad piece length")
            raw = buf[pos:pos + n]
            try:
                pieces.append(raw.decode("utf-8"))
            except UnicodeDecodeError:  # a lone byte token (0x80..0xFF): SentencePiece's notation
                pieces.append("".join(f"<0x{b:02X}>" for b in raw))
            scores.append(float(score))
            pos += n
    except struct.error:
        raise ConvertError(f"{path}: not a llama2.c tokenizer with {vocab_size} tokens") from None
    return max_len, pieces, scores


def _atomic_write(path, write):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix="." + os.path.basename(path) + ".")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _write_json(obj):
    def write(path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=1, ensure_ascii=False)
            f.write("\n")
    return write


def convert(model_bin, out_dir, tokenizer_bin=None):
    """Convert; returns the params dict. Files appear only once complete."""
    params, weights = read_checkpoint(model_bin)
    tok = read_tokenizer(tokenizer_bin, params["vocab_size"]) if tokenizer_bin else None
    os.makedirs(out_dir, exist_ok=True)
    _atomic_write(os.path.join(out_dir, "model.safetensors"),
                  lambda p: write_safetensors(p, hf_tensors(params, weights), {"format": "pt"}))
    _atomic_write(os.path.join(out_dir, "config.json"), _write_json(hf_config(params)))
    if tok:
        max_len, pieces, scores = tok
        _atomic_write(os.path.join(out_dir, "tokenizer_pieces.json"), _write_json({
            "format": "llama2c-tokenizer-pieces", "source": os.path.basename(tokenizer_bin),
            "max_token_length": max_len, "bos_id": 1, "eos_id": 2,
            "pieces": pieces, "scores": scores}))
    return params


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m kvsim.convert_llama2c",
                                 description="llama2.c checkpoint -> Hugging Face Llama directory")
    ap.add_argument("model", help="llama2.c checkpoint (legacy version-0 .bin)")
    ap.add_argument("out_dir", help="output directory (created if missing)")
    ap.add_argument("--tokenizer", help="llama2.c tokenizer.bin: write tokenizer_pieces.json")
    args = ap.parse_args(argv)
    try:
        p = convert(args.model, args.out_dir, args.tokenizer)
    except (ConvertError, OSError) as e:
        print(f"kvsim.convert_llama2c: {e}", file=sys.stderr)
        return 2
    print(f"{args.out_dir}: dim={p['dim']} n_layers={p['n_layers']} n_heads={p['n_heads']} "
          f"n_kv_heads={p['n_kv_heads']} vocab_size={p['vocab_size']} seq_len={p['seq_len']} "
          f"classifier={'shared' if p['shared_classifier'] else 'unshared'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
