"""Crafted trace files: each is built here with h5py, given to the CLI, and must get
one line naming the file (and dataset) and exit code 2, within bounded time and memory;
never a crash, a hang or a silent wrong answer. The files join tests/fuzz/corpus too."""

import os
import resource
import subprocess
import tempfile
import time
import unittest
import zlib

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXE = os.environ.get("KVSIM_EXE", os.path.join(ROOT, "build", "kvsim"))


def make_trace(path, n_seqs=1, n=16, heads=2, kv=2, d=8, libver=None, q=None, token_text=True,
               dataset_kwargs=None, skip_write=(), tokens_dtype=np.int32, attn_scale=None):
    """A schema v1 trace with q, k, v float16; dataset_kwargs go to every tensor dataset."""
    rng = np.random.default_rng(0)
    kwargs = dataset_kwargs or {}
    with h5py.File(path, "w", libver=libver or "earliest") as f:
        for key, value in dict(format="kvtrace", version=1, model="crafted", source="test", n_layers=1,
                               n_heads=heads, n_kv_heads=kv, head_dim=d, created="", tool="test").items():
            f.attrs[key] = value
        if attn_scale is not None:
            f.attrs["attn_scale"] = attn_scale
        seqs = f.create_group("seqs")
        for s in range(n_seqs):
            g = seqs.create_group(str(s))
            g.attrs["n_tokens"] = n
            g.attrs["prompt_len"] = n // 2
            g.create_dataset("tokens", data=np.arange(n, dtype=tokens_dtype))
            if token_text:
                g.create_dataset("token_text", data=[f"t{i}" for i in range(n)], dtype=h5py.string_dtype())
            layer = g.create_group("layers").create_group("0")
            for name, count in (("q", heads), ("k", kv), ("v", kv)):
                if name in skip_write:
                    layer.create_dataset(name, shape=(count, n, d), dtype=np.float16, **kwargs)
                    continue
                data = rng.normal(size=(count, n, d)).astype(np.float16)
                if name == "q" and q is not None:
                    data = q
                layer.create_dataset(name, data=data, **kwargs)


def run(*args, memory_gb=None, timeout=120):
    def limit():
        if memory_gb:
            resource.setrlimit(resource.RLIMIT_AS, (memory_gb << 30, memory_gb << 30))
    start = time.monotonic()
    result = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=timeout, preexec_fn=limit)
    return result, time.monotonic() - start


@unittest.skipUnless(os.path.exists(EXE), f"no kvsim program at {EXE} (set KVSIM_EXE)")
class HostileFiles(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        # KVSIM_KEEP_CRAFTED=DIR keeps the crafted files (how tests/fuzz/corpus/regress-crafted-* were made).
        keep = os.environ.get("KVSIM_KEEP_CRAFTED")
        if keep:
            self.addCleanup(lambda: subprocess.run(["cp", "-r", self.dir.name + "/.", keep], check=False))

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def refused(self, result, *fragments):
        out = result.stdout + result.stderr
        self.assertEqual(result.returncode, 2, out)
        self.assertEqual(out.count("\n"), 1, out)
        for fragment in fragments:
            self.assertIn(fragment, out)

    # 3. Filters kvsim does not read are refused before HDF5 decodes a chunk.
    def test_unsupported_filters_are_named(self):
        cases = []
        if h5py.h5z.filter_avail(h5py.h5z.FILTER_SZIP):
            cases.append(("szip.h5", dict(compression="szip", chunks=(1, 16, 8)), "szip"))
        cases.append(("lzf.h5", dict(compression="lzf", chunks=(1, 16, 8)), "32000"))
        for name, kwargs, fragment in cases:
            make_trace(self.path(name), dataset_kwargs=kwargs)
            for verb in ("info", "validate", "sweep"):
                result, _ = run(verb, self.path(name))
                self.refused(result, name, "/seqs/0/layers/0/q", fragment)

    # 4. A chunk that inflates past its declared size is refused in bounded memory.
    def test_zip_bomb_chunk(self):
        path = self.path("bomb.h5")
        # Both heads in one chunk of 512 KiB, so a head is a partial chunk: HDF5's own path.
        make_trace(path, n=16384, token_text=False, dataset_kwargs=dict(compression="gzip", chunks=(2, 16384, 8)))
        bomb = zlib.compress(bytes(1 << 28), 9)  # 256 MiB of zeros in 256 KiB
        with h5py.File(path, "r+") as f:
            f["seqs/0/layers/0/q"].id.write_direct_chunk((0, 0, 0), bomb)
        for verb in ("validate", "replay"):
            args = [verb, path] + (["--policy", "h2o", "--budget", "4"] if verb == "replay" else [])
            result, _ = run(*args, memory_gb=2)
            self.refused(result, "bomb.h5", "inflates past")

    # 5. Opening is linear in the number of sequences, also with libver='latest'.
    def test_many_sequences_latest_format(self):
        path = self.path("many.h5")
        make_trace(path, n_seqs=6000, n=2, heads=1, kv=1, d=2, libver="latest", token_text=False)
        result, _ = run("info", path, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("6000", result.stdout)

    # 5. A FIFO given as the trace is refused, not waited on.
    def test_fifo_is_not_read(self):
        fifo = self.path("fifo.h5")
        os.mkfifo(fifo)
        result, _ = run("info", fifo, timeout=20)
        self.refused(result, "fifo.h5", "not a regular file")

    # 5. Datasets declared but never written (fill values) are refused, in bounded memory.
    def test_unwritten_datasets(self):
        path = self.path("unwritten.h5")
        make_trace(path, n=1 << 20, heads=1, kv=1, d=2, token_text=False, skip_write=("q", "k", "v"),
                   dataset_kwargs=dict(chunks=(1, 4096, 2)))
        for verb in ("info", "validate"):
            result, _ = run(verb, path, memory_gb=2, timeout=60)
            self.refused(result, "unwritten.h5", "/seqs/0/layers/0/q", "never written")

    # 7. Finite q whose scores overflow: refused naming sequence, layer and head.
    def test_overflowing_scores(self):
        path = self.path("overflow.h5")
        q = np.full((2, 16, 8), 60000, dtype=np.float16)
        make_trace(path, q=q, attn_scale=1e36)
        for verb in ("validate", "replay"):
            args = [verb, path] + (["--policy", "h2o", "--budget", "4"] if verb == "replay" else [])
            result, _ = run(*args)
            self.refused(result, "overflow.h5", "/seqs/0/layers/0", "head 0", "overflow")

    # 16. Token ids beyond int32 are refused, not clamped.
    def test_int64_token_ids(self):
        path = self.path("tokens64.h5")
        make_trace(path, tokens_dtype=np.int64)
        with h5py.File(path, "r+") as f:
            data = f["seqs/0/tokens"][...]
            data[3] = 1 << 40
            f["seqs/0/tokens"][...] = data
        result, _ = run("validate", path)
        self.refused(result, "tokens64.h5", "/seqs/0/tokens", "outside")

    # 10. A non-UTF-8 token_text (or path) is written escaped in JSON, before the work ends.
    def test_non_utf8_text_in_json(self):
        path = self.path("latin1-\xe9.h5".encode("latin-1").decode("utf-8", "surrogateescape"))
        make_trace(path)
        with h5py.File(path, "r+") as f:
            del f["seqs/0/token_text"]
            f["seqs/0"].create_dataset("token_text", data=np.array([b"caf\xe9"] * 16, dtype=object),
                                       dtype=h5py.string_dtype("ascii"))
        out = self.path("out.json")
        result = subprocess.run([EXE, "info", path, "--json", out], capture_output=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(out, "rb") as f:
            text = f.read().decode("utf-8")  # valid UTF-8
        self.assertIn("caf\\\\xe9", text)


if __name__ == "__main__":
    unittest.main()
