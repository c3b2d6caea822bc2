"""kvsim.tracefile: schema v1 layout, attribute types, chunking, packed attention, atomicity."""

import datetime
import os
import tempfile
import unittest

import h5py
import numpy as np

from kvsim import tracefile as tf

H, G, HD, L = 4, 2, 8, 3          # GQA: 4 query heads share 2 kv heads
LENGTHS, PROMPTS = (5, 7), (3, 7)
TEXT = ["<s>", " héllo", "\u2581日本", " 🙂", "\n", "a", "<0x0A>"]


def make_seq(rng, n, with_attn):
    layers = []
    for l in range(L):
        q = rng.standard_normal((H, n, HD)).astype(np.float32)
        k = rng.standard_normal((G, n, HD)).astype(np.float32)
        v = rng.standard_normal((G, n, HD)).astype(np.float32)
        layer = {"q": q, "k": k, "v": v}
        if with_attn:
            full = np.stack([tf.causal_attention(q[h], k[h // (H // G)], HD ** -0.5)
                             for h in range(H)])
            layer["attn"] = tf.pack_tril(full) if l % 2 else full  # both input forms
        if l == 1:
            layer.update(sliding_window=4, logit_softcap=50.0)
        layers.append(layer)
    return layers


def str_attr_is_vlen_utf8_scalar(attrs, name):
    aid = attrs.get_id(name)
    t = aid.get_type()
    return (aid.shape == () and isinstance(t, h5py.h5t.TypeStringID) and t.is_variable_str()
            and t.get_cset() == h5py.h5t.CSET_UTF8)


class WriterTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name
        self.path = os.path.join(self.dir, "t.h5")

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, dtype, with_attn, seed=0):
        rng = np.random.default_rng(seed)
        seqs = [make_seq(rng, n, with_attn) for n in LENGTHS]
        with tf.TraceWriter(self.path, model="tiny", source="synthetic", n_layers=L, n_heads=H,
                            n_kv_heads=G, head_dim=HD, dtype=dtype) as w:
            for i, (n, p) in enumerate(zip(LENGTHS, PROMPTS)):
                toks = np.arange(n) * 1000 + 7 * i
                w.write_sequence(toks, p, seqs[i], token_text=TEXT[:n])
        return seqs

    def test_roundtrip(self):
        for dtype in ("float16", "float32"):
            for with_attn in (False, True):
                with self.subTest(dtype=dtype, attn=with_attn):
                    seqs = self.write(dtype, with_attn)
                    self.check_file(seqs, np.dtype(dtype), with_attn)
                    self.assertEqual(os.listdir(self.dir), ["t.h5"])

    def check_file(self, seqs, dtype, with_attn):
        with h5py.File(self.path, "r") as f:
            a = f.attrs
            expect_int = {"version": 1, "n_layers": L, "n_heads": H, "n_kv_heads": G, "head_dim": HD}
            for name, value in expect_int.items():
                self.assertEqual(a.get_id(name).shape, ())
                self.assertEqual(a.get_id(name).dtype, np.int64, name)
                self.assertEqual(a[name], value)
            self.assertEqual(a.get_id("attn_scale").dtype, np.float64)
            self.assertAlmostEqual(a["attn_scale"], HD ** -0.5, places=15)
            for name, value in {"format": "kvtrace", "model": "tiny", "source": "synthetic"}.items():
                self.assertTrue(str_attr_is_vlen_utf8_scalar(a, name), name)
                self.assertEqual(a[name], value)
            for name in ("created", "tool"):
                self.assertTrue(str_attr_is_vlen_utf8_scalar(a, name), name)
            created = datetime.datetime.strptime(a["created"], "%Y-%m-%dT%H:%M:%SZ")
            now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
            self.assertLess(abs((now - created).total_seconds()), 600)
            self.assertRegex(a["tool"], r"^kvsim-dump \S+$")
            self.assertEqual(set(f["seqs"].keys()), {"0", "1"})
            for i, n in enumerate(LENGTHS):
                g = f[f"seqs/{i}"]
                self.assertEqual(g.attrs.get_id("n_tokens").dtype, np.int64)
                self.assertEqual((g.attrs["n_tokens"], g.attrs["prompt_len"]), (n, PROMPTS[i]))
                self.assertEqual(g["tokens"].dtype, np.int32)
                np.testing.assert_array_equal(g["tokens"][()], np.arange(n) * 1000 + 7 * i)
                tt = g["token_text"]
                self.assertEqual(h5py.check_string_dtype(tt.dtype).encoding, "utf-8")
                self.assertIsNone(h5py.check_string_dtype(tt.dtype).length)
                self.assertEqual([s.decode() for s in tt[()]], TEXT[:n])
                self.assertEqual(set(g["layers"].keys()), {str(l) for l in range(L)})
                for l in range(L):
                    self.check_layer(g[f"layers/{l}"], seqs[i][l], n, dtype, with_attn)

    def check_layer(self, g, src, n, dtype, with_attn):
        for name, heads in (("q", H), ("k", G), ("v", G)):
            d = g[name]
            self.assertEqual((d.shape, d.dtype, d.chunks), ((heads, n, HD), dtype, (1, n, HD)))
            np.testing.assert_array_equal(d[()], src[name].astype(dtype))
        self.assertEqual("attn" in g, with_attn)
        if with_attn:
            d = g["attn"]
            plen = n * (n + 1) // 2
            self.assertEqual((d.shape, d.dtype, d.chunks), ((H, plen), dtype, (1, plen)))
            for h in range(H):
                full = tf.causal_attention(src["q"][h], src["k"][h // 2], HD ** -0.5)
                row = d[h]
                for t in range(n):
                    off = t * (t + 1) // 2
                    np.testing.assert_allclose(row[off:off + t + 1], full[t, :t + 1],
                                               atol=1e-3 if dtype == np.float16 else 1e-6)
                    self.assertAlmostEqual(float(row[off:off + t + 1].sum()), 1.0, delta=3e-3)
        if "sliding_window" in src:
            self.assertEqual(g.attrs.get_id("sliding_window").dtype, np.int64)
            self.assertEqual(g.attrs["sliding_window"], 4)
            self.assertEqual(g.attrs.get_id("logit_softcap").dtype, np.float64)
            self.assertEqual(g.attrs["logit_softcap"], 50.0)
        else:
            self.assertNotIn("sliding_window", g.attrs)

    def test_reader(self):
        seqs = self.write("float32", with_attn=False)
        with tf.TraceReader(self.path) as r:
            self.assertEqual((r.n_seqs, r.meta["n_heads"], r.meta["format"]), (2, H, "kvtrace"))
            self.assertEqual(r.seq_meta(1), {"n_tokens": 7, "prompt_len": 7})
            self.assertEqual(r.token_text(0), TEXT[:5])
            np.testing.assert_array_equal(r.q(1, 2, 3), seqs[1][2]["q"][3])
            np.testing.assert_array_equal(r.k(1, 2, 1), seqs[1][2]["k"][1])
            a = r.attention(1, 0, 3)
            np.testing.assert_allclose(a, tf.causal_attention(seqs[1][0]["q"][3],
                                                              seqs[1][0]["k"][1], HD ** -0.5))
            # layer 1 carries a sliding window of 4: row 6 sees positions 3..6 only
            a1 = r.attention(1, 1, 0)
            self.assertTrue(np.all(a1[6, :3] == 0) and np.all(a1[6, 3:] > 0))

    def test_reader_rejects_other_versions(self):
        self.write("float16", with_attn=False)
        with h5py.File(self.path, "r+") as f:
            f.attrs.create("version", np.int64(2))
        with self.assertRaisesRegex(ValueError, "version 2 is not supported"):
            tf.TraceReader(self.path)

    def test_exception_leaves_no_file(self):
        rng = np.random.default_rng(1)
        with self.assertRaises(RuntimeError):
            with tf.TraceWriter(self.path, model="m", source="synthetic", n_layers=L, n_heads=H,
                                n_kv_heads=G, head_dim=HD) as w:
                w.write_sequence([1, 2, 3, 4, 5], 2, make_seq(rng, 5, False))
                self.assertFalse(os.path.exists(self.path))   # not visible while writing
                self.assertEqual(len(os.listdir(self.dir)), 1)  # only the temporary file
                raise RuntimeError("boom")
        self.assertEqual(os.listdir(self.dir), [])

    def test_failed_write_keeps_old_file(self):
        with open(self.path, "w") as f:
            f.write("old")
        with self.assertRaises(ValueError):
            with tf.TraceWriter(self.path, model="m", source="synthetic", n_layers=L, n_heads=H,
                                n_kv_heads=G, head_dim=HD) as w:
                seq = w.begin_sequence([1, 2, 3], 1)
                seq.write_layer(0, q=np.zeros((H, 3, HD)), k=np.zeros((H, 3, HD)))  # k: G heads
        with open(self.path) as f:
            self.assertEqual(f.read(), "old")
        self.assertEqual(os.listdir(self.dir), ["t.h5"])

    def test_unfinished_sequence_fails_close(self):
        with self.assertRaisesRegex(RuntimeError, "layers \\[1, 2\\] were not written"):
            with tf.TraceWriter(self.path, model="m", source="synthetic", n_layers=L, n_heads=H,
                                n_kv_heads=G, head_dim=HD) as w:
                seq = w.begin_sequence([1, 2], 1)
                seq.write_layer(0, q=np.zeros((H, 2, HD)), k=np.zeros((G, 2, HD)))
                seq.finish()
        self.assertEqual(os.listdir(self.dir), [])

    def test_validation(self):
        w = tf.TraceWriter(self.path, model="m", source="synthetic", n_layers=1, n_heads=H,
                           n_kv_heads=G, head_dim=HD)
        try:
            seq = w.begin_sequence([1, 2], 2)
            with self.assertRaisesRegex(ValueError, "needs q and k, or attn"):
                seq.write_layer(0, q=np.zeros((H, 2, HD)))
            with self.assertRaisesRegex(ValueError, "float16 overflow"):
                seq.write_layer(0, q=np.full((H, 2, HD), 1e6), k=np.zeros((G, 2, HD)))
            with self.assertRaisesRegex(RuntimeError, "not finished"):
                w.begin_sequence([1], 1)
        finally:
            w.abort()
        self.assertEqual(os.listdir(self.dir), [])
        with self.assertRaisesRegex(ValueError, "multiple of n_kv_heads"):
            tf.TraceWriter(self.path, model="m", source="s", n_layers=1, n_heads=4, n_kv_heads=3,
                           head_dim=8)

    def test_spans_question_len_and_context_group(self):
        spans = [{"kind": "context", "start": 1, "end": 3}, {"kind": "needle", "name": "n\u00e9", "start": 2, "end": 3}]
        rng = np.random.default_rng(2)
        with tf.TraceWriter(self.path, model="m", source="synthetic", n_layers=L, n_heads=H,
                            n_kv_heads=G, head_dim=HD) as w:
            for i, tokens in enumerate(([1, 5, 6, 7, 8], [1, 5, 6, 9, 4], [1, 2])):
                marks = {"question_len": 2, "spans": spans, "context_group": 4} if i < 2 else {}
                seq = w.begin_sequence(tokens, 4 if i < 2 else 2, **marks)
                for layer, data in enumerate(make_seq(rng, len(tokens), False)):
                    seq.write_layer(layer, **data)
                seq.finish()
        with tf.TraceReader(self.path) as r:
            self.assertEqual(r.seq_meta(1), {"n_tokens": 5, "prompt_len": 4, "question_len": 2, "context_group": 4})
            self.assertEqual(r.spans(0), [dict(spans[0], name="context"), spans[1]])
            self.assertEqual((r.seq_meta(2), r.spans(2)), ({"n_tokens": 2, "prompt_len": 2}, []))
            self.assertNotIn("spans", r.seq(2))
            kind = r.seq(0)["spans/kind"]
            self.assertTrue(kind.id.get_type().is_variable_str())
            self.assertEqual(kind.id.get_type().get_cset(), h5py.h5t.CSET_UTF8)
        bad = [({"spans": [{"kind": "a b", "start": 0, "end": 1}]}, "span 0: kind 'a b' is not 1..64"),
               ({"spans": [{"kind": "x", "start": 1, "end": 4}]}, r"span 0: range \[1, 4\) is not within 0..n_tokens \(3\)"),
               ({"spans": [{"kind": "x", "name": "", "start": 0, "end": 1}]}, "span 0: a name of 0 bytes"),
               ({"spans": [{"kind": "x", "start": 0, "end": 1}] * 4097}, "4097 spans, more than 4096"),
               ({"question_len": 3}, r"question_len 3 is outside 0..prompt_len \(2\)"),
               ({"question_len": 0, "context_group": 1}, "a context_group needs question_len >= 1"),
               ({"question_len": 1, "context_group": -1}, "context_group -1 is not an integer >= 0"),
               ({"question_len": 1, "context_group": 0}, "context_group 0 holds seq 0, whose context .* differs")]
        w = tf.TraceWriter(self.path, model="m", source="synthetic", n_layers=1, n_heads=H, n_kv_heads=G, head_dim=HD)
        try:
            seq = w.begin_sequence([1, 2, 3], 2, question_len=1, context_group=0)  # context [1]
            seq.write_layer(0, q=np.zeros((H, 3, HD)), k=np.zeros((G, 3, HD)))
            seq.finish()
            for marks, msg in bad:
                with self.subTest(msg=msg):
                    with self.assertRaisesRegex(ValueError, "seq 1: " + msg):
                        w.begin_sequence([7, 2, 3], 2, **marks)
                    self.assertIsNone(w._seq)  # nothing begun
        finally:
            w.abort()

    def test_attention_only_layer(self):
        attn = tf.pack_tril(np.stack([np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]] * H))
        with tf.TraceWriter(self.path, model="m", source="synthetic", n_layers=1, n_heads=H,
                            n_kv_heads=G, head_dim=HD, attn_scale=0.25, created="2024-01-01T00:00:00Z",
                            tool="test 1") as w:
            w.write_sequence([5, 6, 7], 1, [{"attn": attn}])
            w.write_sequence([5], 1, [{"attn": attn[:, :1]}], token_text=["\0"])
        with h5py.File(self.path) as f:
            self.assertEqual(set(f["seqs/0/layers/0"].keys()), {"attn"})
            self.assertNotIn("token_text", f["seqs/0"])
            self.assertEqual(f["seqs/1/token_text"][0], b"<0x00>")  # HDF5 strings end at NUL
            self.assertEqual((f.attrs["attn_scale"], f.attrs["tool"]), (0.25, "test 1"))
            np.testing.assert_allclose(f["seqs/0/layers/0/attn"][0], [1, .5, .5, 1 / 3, 1 / 3, 1 / 3],
                                       rtol=1e-3)


class PackTest(unittest.TestCase):
    def test_pack_layout(self):
        a = np.arange(9).reshape(3, 3)
        np.testing.assert_array_equal(tf.pack_tril(a), [0, 3, 4, 6, 7, 8])
        np.testing.assert_array_equal(tf.unpack_tril(tf.pack_tril(a), 3), np.tril(a))
        self.assertEqual(tf.packed_len(7), 28)

    def test_causal_attention_window_and_softcap(self):
        rng = np.random.default_rng(3)
        q, k = rng.standard_normal((6, 4)), rng.standard_normal((6, 4))
        a = tf.causal_attention(q, k, 0.5, sliding_window=2, logit_softcap=1.0)
        np.testing.assert_allclose(a.sum(axis=1), 1)
        self.assertTrue(np.all(np.count_nonzero(a, axis=1) == [1, 2, 2, 2, 2, 2]))
        s = np.tanh(0.5 * q[5] @ k[4:6].T)
        np.testing.assert_allclose(a[5, 4:6], np.exp(s) / np.exp(s).sum())


if __name__ == "__main__":
    unittest.main()
