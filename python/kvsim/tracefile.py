"""Write and read kvsim trace files (schema v1, HDF5), with numpy and h5py only.

The layout is the one in docs/semantics.md, section 1:

    /                 attrs format="kvtrace", version=1, model, source, n_layers, n_heads,
                      n_kv_heads, head_dim, attn_scale, created, tool
    /seqs/<i>/        attrs n_tokens, prompt_len, optional question_len and context_group;
                      datasets tokens (int32), token_text (UTF-8)
    /seqs/<i>/spans/  start, end (int64), kind, name (UTF-8): named token ranges
    /seqs/<i>/layers/<l>/q [n_heads, T, hd], k and v [n_kv_heads, T, hd],
                         attn [n_heads, T*(T+1)/2] (packed row-major lower triangle)

Writing, one sequence at a time (a file never holds more than one open sequence in memory):

    from kvsim.tracefile import TraceWriter
    with TraceWriter("out.h5", model="stories15M", source="hf-dump", n_layers=6, n_heads=6,
                     n_kv_heads=6, head_dim=48) as w:          # attn_scale: 1/sqrt(head_dim)
        seq = w.begin_sequence(tokens, prompt_len=8, token_text=pieces)  # optional question_len=,
                                                      # spans=[{kind, name, start, end}], context_group=
        for l in range(6):
            seq.write_layer(l, q=q[l], k=k[l], v=v[l])        # optional attn=, sliding_window=
        seq.finish()

The file is written under a temporary name in the destination directory and renamed into
place by close() (or a clean `with` exit); on an exception the temporary file is deleted, so
a half-written trace never appears under the requested name.

Reading (for tests and quick looks): TraceReader(path).meta, .seq_meta(i), .tokens(i), .spans(i),
.q(i, l, h), .k(i, l, g), .v(i, l, g), .attn_row(i, l, h, t), .attention(i, l, h).

This file is over 400 lines on purpose: the writer and the reader of one layout, side by side.
"""

from __future__ import annotations

import datetime
import os
import tempfile

import h5py
import numpy as np

from .spans import MAX_SPANS, span_problem

FORMAT = "kvtrace"
VERSION = 1
_STR = h5py.string_dtype("utf-8")
_DTYPES = {"float16": np.float16, "float32": np.float32}


def packed_len(n_tokens: int) -> int:
    """Number of entries of a packed causal attention row set: n(n+1)/2."""
    return n_tokens * (n_tokens + 1) // 2


def pack_tril(a: np.ndarray) -> np.ndarray:
    """[..., T, T] -> [..., T(T+1)/2]: row t's entries 0..t, rows in order (row t at t(t+1)/2)."""
    a = np.asarray(a)
    n = a.shape[-1]
    if a.shape[-2] != n:
        raise ValueError(f"pack_tril needs square matrices, got shape {a.shape}")
    return a[..., np.tril(np.ones((n, n), dtype=bool))]


def unpack_tril(p: np.ndarray, n_tokens: int) -> np.ndarray:
    """Inverse of pack_tril; the upper triangle is filled with zeros."""
    p = np.asarray(p)
    out = np.zeros(p.shape[:-1] + (n_tokens, n_tokens), dtype=p.dtype)
    out[..., np.tril(np.ones((n_tokens, n_tokens), dtype=bool))] = p
    return out


def causal_attention(q, k, scale, sliding_window=None, logit_softcap=None) -> np.ndarray:
    """Reference causal softmax rows for one query head: q [T, hd], k [T, hd] -> [T, T] float64.

    Scores are scale * q.k (then softcap * tanh(s / softcap) if given); position t attends
    to positions i <= t, and with a sliding window W only to t - W < i <= t (HF's convention).
    """
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    s = scale * (q @ k.T)
    if logit_softcap:
        s = logit_softcap * np.tanh(s / logit_softcap)
    t = np.arange(q.shape[0])[:, None]
    i = np.arange(k.shape[0])[None, :]
    allowed = i <= t
    if sliding_window:
        allowed &= i > t - sliding_window
    s = np.where(allowed, s, -np.inf)
    s -= s.max(axis=1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=1, keepdims=True)


def _int_attr(attrs, name, value):
    attrs.create(name, np.int64(value), dtype=np.int64)


def _str_attr(attrs, name, value):
    attrs.create(name, str(value), dtype=_STR)


ROPE_ATTRS = ("rope_theta", "rope_scaling_type", "rope_scaling_factor", "rotary_dims", "rope_pairing")


def _checked_rope(rope, head_dim):
    """The optional RoPE root attrs (docs/traces.md), checked as kvsim's reader checks them."""
    unknown = set(rope) - set(ROPE_ATTRS)
    if unknown:
        raise ValueError(f"unknown RoPE attributes {sorted(unknown)}; known: {', '.join(ROPE_ATTRS)}")
    out = {}
    for name in ("rope_theta", "rope_scaling_factor"):
        if rope.get(name) is not None:
            v = float(rope[name])
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a positive finite number, not {rope[name]!r}")
            out[name] = v
    if rope.get("rope_scaling_type") is not None:
        if not str(rope["rope_scaling_type"]):
            raise ValueError("rope_scaling_type is empty")
        out["rope_scaling_type"] = str(rope["rope_scaling_type"])
    if rope.get("rotary_dims") is not None:
        v = rope["rotary_dims"]
        if int(v) != v or v < 2 or v % 2 or v > head_dim:
            raise ValueError(f"rotary_dims must be even and in [2, head_dim = {head_dim}], not {v!r}")
        out["rotary_dims"] = int(v)
    if rope.get("rope_pairing") is not None:
        if rope["rope_pairing"] not in ("interleaved", "half"):
            raise ValueError(f"rope_pairing must be interleaved or half, not {rope['rope_pairing']!r}")
        out["rope_pairing"] = rope["rope_pairing"]
    return out


class TraceWriter:
    """Writes one trace file; see the module docstring. Use as a context manager."""

    def __init__(self, path, *, model, source, n_layers, n_heads, n_kv_heads, head_dim,
                 attn_scale=None, tool=None, dtype="float16", created=None, rope=None):
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be float16 or float32, not {dtype!r}")
        for name, v in (("n_layers", n_layers), ("n_heads", n_heads),
                        ("n_kv_heads", n_kv_heads), ("head_dim", head_dim)):
            if int(v) != v or v < 1:
                raise ValueError(f"{name} must be a positive integer, not {v!r}")
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
        if attn_scale is None:
            attn_scale = 1.0 / float(np.sqrt(head_dim))
        rope = _checked_rope(rope or {}, int(head_dim))
        if created is None:
            now = datetime.datetime.now(datetime.timezone.utc)
            created = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        if tool is None:
            from . import __version__
            tool = f"kvsim-dump {__version__}"
        self.path = os.fspath(path)
        self.n_layers, self.n_heads = int(n_layers), int(n_heads)
        self.n_kv_heads, self.head_dim = int(n_kv_heads), int(head_dim)
        self.attn_scale = float(attn_scale)
        self.dtype = _DTYPES[dtype]
        self.n_seqs = 0
        self._seq = None
        self._groups = {}  # context_group -> (its first sequence, the context's tokens)
        directory = os.path.dirname(os.path.abspath(self.path))
        fd, self._tmp = tempfile.mkstemp(dir=directory, suffix=".tmp",
                                         prefix="." + os.path.basename(self.path) + ".")
        os.close(fd)
        try:
            self._f = h5py.File(self._tmp, "w")
            a = self._f.attrs
            _str_attr(a, "format", FORMAT)
            _int_attr(a, "version", VERSION)
            _str_attr(a, "model", model)
            _str_attr(a, "source", source)
            _int_attr(a, "n_layers", self.n_layers)
            _int_attr(a, "n_heads", self.n_heads)
            _int_attr(a, "n_kv_heads", self.n_kv_heads)
            _int_attr(a, "head_dim", self.head_dim)
            a.create("attn_scale", np.float64(self.attn_scale), dtype=np.float64)
            _str_attr(a, "created", created)
            _str_attr(a, "tool", tool)
            for name, value in rope.items():
                if isinstance(value, str):
                    _str_attr(a, name, value)
                elif name == "rotary_dims":
                    _int_attr(a, name, value)
                else:
                    a.create(name, np.float64(value), dtype=np.float64)
            self._seqs = self._f.create_group("seqs")
        except BaseException:
            self.abort()
            raise

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False

    def begin_sequence(self, tokens, prompt_len, token_text=None, *, question_len=None,
                       spans=None, context_group=None) -> "SequenceWriter":
        """Start sequence number self.n_seqs; the previous one must have been finished.
        spans: dicts {kind, name (default: the kind), start, end} in token positions;
        sequences of one context_group must share their context (docs/semantics.md, section 1)."""
        if self._f is None:
            raise RuntimeError("trace writer is closed")
        if self._seq is not None:
            raise RuntimeError(f"sequence {self._seq.index} is not finished")
        self._seq = SequenceWriter(self, self.n_seqs, tokens, prompt_len, token_text,
                                   (question_len, spans, context_group))
        return self._seq

    def write_sequence(self, tokens, prompt_len, layers, token_text=None):
        """Convenience: layers is a list of dicts with keys q, k, v, attn, sliding_window, ..."""
        seq = self.begin_sequence(tokens, prompt_len, token_text)
        for l, layer in enumerate(layers):
            seq.write_layer(l, **layer)
        seq.finish()

    def _finished(self, seq):
        self._seq = None
        self.n_seqs += 1
        self._f.flush()

    def close(self):
        """Finish the file and move it to its final name."""
        if self._f is None:
            return
        try:
            if self._seq is not None:
                raise RuntimeError(f"sequence {self._seq.index} was not finished")
            if self.n_seqs == 0:
                raise RuntimeError("a trace file needs at least one sequence")
            self._f.close()
            self._f = None
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(self._tmp, 0o666 & ~umask)
            os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise

    def abort(self):
        """Close and delete the temporary file; the destination is left untouched."""
        f, self._f = getattr(self, "_f", None), None
        if f is not None:
            try:
                f.close()
            except Exception:
                pass
        try:
            os.unlink(self._tmp)
        except FileNotFoundError:
            pass


def _checked_marks(writer, index, tokens, prompt_len, question_len, spans, context_group):
    """A sequence's span rows (kind, name, start, end), its question_len and context_group
    checked as kvsim's reader checks them; the sequences of a context_group have one context
    (their tokens before the question), which the group's first sequence sets."""
    if question_len is not None and (int(question_len) != question_len or not 0 <= question_len <= prompt_len):
        raise ValueError(f"seq {index}: question_len {question_len} is outside 0..prompt_len ({prompt_len})")
    spans = list(spans or [])
    if len(spans) > MAX_SPANS:
        raise ValueError(f"seq {index}: {len(spans)} spans, more than {MAX_SPANS}")
    rows = [(s["kind"], s.get("name", s["kind"]), int(s["start"]), int(s["end"])) for s in spans]
    for i, row in enumerate(rows):
        problem = span_problem(*row, tokens.size)
        if problem:
            raise ValueError(f"seq {index}: span {i}: {problem}")
    if context_group is not None:
        if int(context_group) != context_group or context_group < 0:
            raise ValueError(f"seq {index}: context_group {context_group} is not an integer >= 0")
        if not question_len:
            raise ValueError(f"seq {index}: a context_group needs question_len >= 1")
        context = tokens[:prompt_len - int(question_len)]
        first, shared = writer._groups.get(int(context_group), (index, context))
        if not np.array_equal(shared, context):
            raise ValueError(f"seq {index}: context_group {context_group} holds seq {first}, whose "
                             "context (the tokens before the question) differs")
        writer._groups[int(context_group)] = (first, shared)
    return rows


class SequenceWriter:
    """One /seqs/<i> group; write every layer once, then finish()."""

    def __init__(self, writer: TraceWriter, index, tokens, prompt_len, token_text, marks=(None, None, None)):
        tokens = np.asarray(tokens)
        if tokens.ndim != 1 or tokens.size == 0:
            raise ValueError("tokens must be a non-empty 1-D sequence")
        if not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"tokens must be integers, got {tokens.dtype}")
        if np.any(tokens < np.iinfo(np.int32).min) or np.any(tokens > np.iinfo(np.int32).max):
            raise ValueError("token ids do not fit in int32")
        n = int(tokens.size)
        if not 0 <= int(prompt_len) <= n:
            raise ValueError(f"prompt_len {prompt_len} is outside 0..{n}")
        question_len, context_group = marks[0], marks[2]
        spans = _checked_marks(writer, index, tokens, int(prompt_len), *marks)
        self.w, self.index, self.n_tokens = writer, index, n
        self.g = writer._seqs.create_group(str(index))
        _int_attr(self.g.attrs, "n_tokens", n)
        _int_attr(self.g.attrs, "prompt_len", int(prompt_len))
        self.g.create_dataset("tokens", data=tokens.astype(np.int32), track_times=False)
        if token_text is not None:
            # HDF5 strings cannot hold NUL or invalid UTF-8: write those as <0x00> / U+FFFD
            token_text = [str(s).encode("utf-8", "replace").decode("utf-8")
                          .replace("\0", "<0x00>") for s in token_text]
            if len(token_text) != n:
                raise ValueError(f"token_text has {len(token_text)} entries for {n} tokens")
            self.g.create_dataset("token_text", data=token_text, dtype=_STR, track_times=False)
        if question_len is not None:
            _int_attr(self.g.attrs, "question_len", int(question_len))
        if context_group is not None:
            _int_attr(self.g.attrs, "context_group", int(context_group))
        if spans:  # a trace without spans has no spans group
            g = self.g.create_group("spans")
            for j, name in enumerate(("kind", "name", "start", "end")):
                column = [row[j] for row in spans]
                if j < 2:
                    g.create_dataset(name, data=column, dtype=_STR, track_times=False)
                else:
                    g.create_dataset(name, data=np.asarray(column, dtype=np.int64), track_times=False)
        self.layers = self.g.create_group("layers")
        self.written = set()

    def _dataset(self, group, name, data, shape, what):
        data = np.asarray(data)
        if data.shape != shape:
            raise ValueError(f"seq {self.index} layer {group.name.rsplit('/', 1)[-1]}: "
                             f"{what} has shape {data.shape}, expected {shape}")
        with np.errstate(over="ignore", invalid="ignore"):
            out = data.astype(self.w.dtype)
        if not np.all(np.isfinite(out)):
            hint = " (float16 overflow? write float32)" if np.all(np.isfinite(data)) else ""
            raise ValueError(f"seq {self.index} layer {group.name.rsplit('/', 1)[-1]}: "
                             f"{what} has non-finite values{hint}")
        chunks = (1,) + shape[1:]
        group.create_dataset(name, data=out, chunks=chunks, track_times=False)

    def write_layer(self, layer, q=None, k=None, v=None, attn=None,
                    sliding_window=None, logit_softcap=None):
        """Write /seqs/<i>/layers/<layer>. Needs q and k, or attn. attn may be packed
        [n_heads, T(T+1)/2] or full [n_heads, T, T] (then packed here)."""
        w, n = self.w, self.n_tokens
        layer = int(layer)
        if not 0 <= layer < w.n_layers:
            raise ValueError(f"layer {layer} is outside 0..{w.n_layers - 1}")
        if layer in self.written:
            raise ValueError(f"seq {self.index}: layer {layer} written twice")
        if (q is None or k is None) and attn is None:
            raise ValueError(f"seq {self.index} layer {layer}: needs q and k, or attn")
        g = self.layers.create_group(str(layer))
        if q is not None:
            self._dataset(g, "q", q, (w.n_heads, n, w.head_dim), "q")
        if k is not None:
            self._dataset(g, "k", k, (w.n_kv_heads, n, w.head_dim), "k")
        if v is not None:
            self._dataset(g, "v", v, (w.n_kv_heads, n, w.head_dim), "v")
        if attn is not None:
            attn = np.asarray(attn)
            if attn.ndim == 3:
                attn = pack_tril(attn)
            self._dataset(g, "attn", attn, (w.n_heads, packed_len(n)), "attn")
        if sliding_window is not None:
            _int_attr(g.attrs, "sliding_window", int(sliding_window))
        if logit_softcap is not None:
            g.attrs.create("logit_softcap", np.float64(logit_softcap), dtype=np.float64)
        self.written.add(layer)

    def finish(self):
        missing = sorted(set(range(self.w.n_layers)) - self.written)
        if missing:
            raise RuntimeError(f"seq {self.index}: layers {missing} were not written")
        self.w._finished(self)


class TraceReader:
    """Minimal reader for tests: checks format/version and hands out per-head arrays."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.f = h5py.File(self.path, "r")
        self.meta = {k: (v.item() if isinstance(v, np.generic) else v)
                     for k, v in self.f.attrs.items()}
        fmt, version = self.meta.get("format"), self.meta.get("version")
        if fmt != FORMAT or version != VERSION:
            self.f.close()
            if fmt != FORMAT:
                raise ValueError(f"{self.path}: not a kvsim trace (format attribute is {fmt!r})")
            raise ValueError(f"{self.path}: trace schema version {version} is not supported "
                             f"(this reader handles version {VERSION})")
        self.n_seqs = len(self.f["seqs"])

    def close(self):
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def seq(self, i):
        return self.f[f"seqs/{i}"]

    def seq_meta(self, i):
        """n_tokens, prompt_len, and question_len and context_group where the sequence has them."""
        a = self.seq(i).attrs
        out = {"n_tokens": int(a["n_tokens"]), "prompt_len": int(a["prompt_len"])}
        out.update({k: int(a[k]) for k in ("question_len", "context_group") if k in a})
        return out

    def spans(self, i):
        """The sequence's spans as dicts {kind, name, start, end}, in the file's order."""
        g = self.seq(i)
        if "spans" not in g:
            return []
        s = g["spans"]
        text = [[v.decode("utf-8") if isinstance(v, bytes) else v for v in s[k][()]] for k in ("kind", "name")]
        return [{"kind": k, "name": n, "start": int(a), "end": int(b)}
                for k, n, a, b in zip(*text, s["start"][()], s["end"][()])]

    def tokens(self, i):
        return self.seq(i)["tokens"][()]

    def token_text(self, i):
        g = self.seq(i)
        if "token_text" not in g:
            return None
        return [s.decode("utf-8") if isinstance(s, bytes) else s for s in g["token_text"][()]]

    def layer(self, i, l):
        return self.seq(i)[f"layers/{l}"]

    def q(self, i, l, h):
        return self.layer(i, l)["q"][h]

    def k(self, i, l, g):
        return self.layer(i, l)["k"][g]

    def v(self, i, l, g):
        return self.layer(i, l)["v"][g]

    def attn_packed(self, i, l, h):
        return self.layer(i, l)["attn"][h]

    def attn_row(self, i, l, h, t):
        """Stored probabilities of row t (t+1 entries)."""
        start = t * (t + 1) // 2
        return self.layer(i, l)["attn"][h, start:start + t + 1]

    def attention(self, i, l, h):
        """Full [T, T] attention of query head h: stored if present, else from q and k."""
        lay = self.layer(i, l)
        n = self.seq_meta(i)["n_tokens"]
        if "attn" in lay:
            return unpack_tril(lay["attn"][h].astype(np.float64), n)
        group = h // (self.meta["n_heads"] // self.meta["n_kv_heads"])
        return causal_attention(lay["q"][h], lay["k"][group], self.meta["attn_scale"],
                                lay.attrs.get("sliding_window"), lay.attrs.get("logit_softcap"))
