"""kvsim.convert_llama2c: layout, safetensors, and the RoPE permutation (interleaved llama2.c
weights with interleaved RoPE == converted weights with HF's half-split RoPE)."""

import contextlib
import io
import json
import os
import struct
import tempfile
import unittest

import numpy as np

from kvsim import convert_llama2c as cv

from . import llama_ref as ref

DIM, HIDDEN, LAYERS, HEADS, KV, VOCAB, SEQ = 16, 24, 2, 4, 2, 11, 8


def stories15m_path():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "kvsim", "models", "stories15M.bin")


class ConvertTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def convert(self, shared, seed=0):
        src = os.path.join(self.dir, f"m{int(shared)}.bin")
        w = ref.write_llama2c_checkpoint(src, np.random.default_rng(seed), DIM, HIDDEN, LAYERS,
                                         HEADS, KV, VOCAB, SEQ, shared=shared)
        out = os.path.join(self.dir, f"hf{int(shared)}")
        cv.convert(src, out)
        return w, out

    def test_permutation_is_hf_formula(self):
        w = np.arange(HEADS * (DIM // HEADS) * 3).reshape(DIM, 3)
        hs = DIM // HEADS
        # HF convert_llama_weights_to_hf.py: view(n_heads, dim1 // n_heads // 2, 2, dim2)
        #                                     .transpose(1, 2).reshape(dim1, dim2)
        hf = np.swapaxes(w.reshape(HEADS, DIM // HEADS // 2, 2, 3), 1, 2).reshape(DIM, 3)
        np.testing.assert_array_equal(cv.permute_rope(w, HEADS), hf)
        for h in range(HEADS):
            for i in range(hs // 2):
                np.testing.assert_array_equal(hf[h * hs + i], w[h * hs + 2 * i])
                np.testing.assert_array_equal(hf[h * hs + hs // 2 + i], w[h * hs + 2 * i + 1])

    def test_layout_and_safetensors(self):
        for shared in (True, False):
            with self.subTest(shared=shared):
                w, out = self.convert(shared)
                self.assertEqual(sorted(os.listdir(out)), ["config.json", "model.safetensors"])
                with open(os.path.join(out, "config.json")) as f:
                    cfg = json.load(f)
                self.assertEqual(cfg["architectures"], ["LlamaForCausalLM"])
                expect = {"hidden_size": DIM, "intermediate_size": HIDDEN, "num_hidden_layers": LAYERS,
                          "num_attention_heads": HEADS, "num_key_value_heads": KV,
                          "vocab_size": VOCAB, "max_position_embeddings": SEQ, "rms_norm_eps": 1e-5,
                          "rope_theta": 10000.0, "tie_word_embeddings": shared,
                          "torch_dtype": "float32"}
                self.assertEqual({k: cfg[k] for k in expect}, expect)
                path = os.path.join(out, "model.safetensors")
                with open(path, "rb") as f:
                    (n,) = struct.unpack("<Q", f.read(8))
                    header = json.loads(f.read(n))
                self.assertEqual(n % 8, 0)
                self.assertEqual(header.pop("__metadata__"), {"format": "pt"})
                spans = sorted(v["data_offsets"] for v in header.values())
                self.assertEqual(spans[0][0], 0)
                self.assertTrue(all(a[1] == b[0] for a, b in zip(spans, spans[1:])))
                self.assertEqual(8 + n + spans[-1][1], os.path.getsize(path))
                self.assertTrue(all(v["dtype"] == "F32" for v in header.values()))
                self.assertEqual("lm_head.weight" in header, not shared)
                self.assertEqual(len(header), 2 + 9 * LAYERS + (0 if shared else 1))
                t = cv.read_safetensors(path)
                self.assertEqual(t["model.layers.1.self_attn.k_proj.weight"].shape, (KV * 4, DIM))
                np.testing.assert_array_equal(t["model.embed_tokens.weight"], w["token_embedding"])
                np.testing.assert_array_equal(t["model.layers.1.mlp.down_proj.weight"], w["w2"][1])
                np.testing.assert_array_equal(t["model.layers.0.mlp.gate_proj.weight"], w["w1"][0])
                np.testing.assert_array_equal(t["model.layers.0.mlp.up_proj.weight"], w["w3"][0])
                np.testing.assert_array_equal(t["model.layers.1.self_attn.v_proj.weight"], w["wv"][1])
                np.testing.assert_array_equal(t["model.layers.1.self_attn.o_proj.weight"], w["wo"][1])
                np.testing.assert_array_equal(t["model.layers.0.self_attn.q_proj.weight"],
                                              cv.permute_rope(w["wq"][0], HEADS))
                np.testing.assert_array_equal(t["model.layers.0.self_attn.k_proj.weight"],
                                              cv.permute_rope(w["wk"][0], KV))
                if not shared:
                    np.testing.assert_array_equal(t["lm_head.weight"], w["wcls"])

    def test_scores_and_logits_match_across_rope_conventions(self):
        tokens = [1, 5, 9, 2, 7, 7, 3, 10]
        for shared in (True, False):
            with self.subTest(shared=shared):
                w, out = self.convert(shared, seed=1 + shared)
                a = ref.weights_from_llama2c(w, LAYERS, shared)
                b = ref.weights_from_hf(cv.read_safetensors(os.path.join(out, "model.safetensors")),
                                        LAYERS, tied=shared)
                la, ra = ref.forward(a, tokens, HEADS, KV, ref.rope_llama2c)
                lb, rb = ref.forward(b, tokens, HEADS, KV, ref.rope_hf)
                for l in range(LAYERS):
                    for h in range(HEADS):
                        sa = ra[l]["q"][h] @ ra[l]["k"][h // (HEADS // KV)].T
                        sb = rb[l]["q"][h] @ rb[l]["k"][h // (HEADS // KV)].T
                        np.testing.assert_allclose(sb, sa, atol=1e-5, rtol=1e-5)
                    np.testing.assert_allclose(rb[l]["probs"], ra[l]["probs"], atol=1e-5)
                np.testing.assert_allclose(lb, la, atol=1e-5, rtol=1e-5)
                # the permutation matters: converted weights with llama2.c's RoPE disagree
                lc, _ = ref.forward(b, tokens, HEADS, KV, ref.rope_llama2c)
                self.assertGreater(np.abs(lc - la).max(), 1e-3)

    def test_tokenizer_pieces(self):
        src = os.path.join(self.dir, "m.bin")
        ref.write_llama2c_checkpoint(src, np.random.default_rng(0), DIM, HIDDEN, LAYERS, HEADS, KV,
                                     VOCAB, SEQ)
        pieces = ["<unk>", "<s>", "</s>", "<0x0A>", " Once", " upon", "é", "日本", " a", "b", " "]
        tok = os.path.join(self.dir, "tokenizer.bin")
        ref.write_llama2c_tokenizer(tok, pieces, max_len=27)
        out = os.path.join(self.dir, "hf")
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(cv.main([src, out, "--tokenizer", tok]), 0)
        with open(os.path.join(out, "tokenizer_pieces.json"), encoding="utf-8") as f:
            j = json.load(f)
        self.assertEqual((j["pieces"], j["max_token_length"]), (pieces, 27))
        self.assertEqual(j["scores"], [-float(i) for i in range(VOCAB)])
        short = os.path.join(self.dir, "short.bin")
        ref.write_llama2c_tokenizer(short, pieces[:5])
        with self.assertRaisesRegex(cv.ConvertError, "not a llama2.c tokenizer with 11 tokens"):
            cv.read_tokenizer(short, VOCAB)

    def test_bad_checkpoints(self):
        src = os.path.join(self.dir, "m.bin")
        ref.write_llama2c_checkpoint(src, np.random.default_rng(0), DIM, HIDDEN, LAYERS, HEADS, KV,
                                     VOCAB, SEQ)
        with open(src, "rb") as f:
            data = f.read()
        bad = os.path.join(self.dir, "bad.bin")
        with open(bad, "wb") as f:
            f.write(data[:-4])
        with self.assertRaisesRegex(cv.ConvertError, "bytes, but the header"):
            cv.read_checkpoint(bad)
        with open(bad, "wb") as f:
            f.write(struct.pack("<I", 0x616B3432) + data[4:])
        with self.assertRaisesRegex(cv.ConvertError, "legacy version-0"):
            cv.read_checkpoint(bad)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(cv.main([bad, os.path.join(self.dir, "o")]), 2)
        self.assertEqual(len(err.getvalue().strip().splitlines()), 1)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "o", "model.safetensors")))


class Stories15MTest(unittest.TestCase):
    """The real stories15M.bin, when a helper has fetched it into the kvsim model cache."""

    def test_stories15m(self):
        path = stories15m_path()
        if not os.path.isfile(path):
            self.skipTest(f"{path} not present")
        with tempfile.TemporaryDirectory() as out:
            tok = os.path.join(os.path.dirname(path), "tokenizer.bin")
            cv.convert(path, out, tok if os.path.isfile(tok) else None)
            p, w = cv.read_checkpoint(path)
            self.assertEqual((p["dim"], p["n_layers"], p["n_heads"], p["n_kv_heads"],
                              p["vocab_size"], p["seq_len"]), (288, 6, 6, 6, 32000, 256))
            t = cv.read_safetensors(os.path.join(out, "model.safetensors"))
            self.assertEqual(t["model.layers.5.self_attn.q_proj.weight"].shape, (288, 288))
            self.assertEqual(t["model.embed_tokens.weight"].shape, (32000, 288))
            a = ref.weights_from_llama2c(w, 6, p["shared_classifier"])
            b = ref.weights_from_hf(t, 6, tied=p["shared_classifier"])
            tokens = [1]
            for _ in range(7):  # greedy with the llama2.c convention
                logits, _ = ref.forward(a, tokens, 6, 6, ref.rope_llama2c)
                tokens.append(int(np.argmax(logits[-1])))
            la, _ = ref.forward(a, tokens, 6, 6, ref.rope_llama2c)
            lb, _ = ref.forward(b, tokens, 6, 6, ref.rope_hf)
            np.testing.assert_allclose(lb, la, atol=1e-4, rtol=1e-5)
            self.assertTrue(np.array_equal(np.argmax(la, -1), np.argmax(lb, -1)))
            if os.path.isfile(tok):
                with open(os.path.join(out, "tokenizer_pieces.json"), encoding="utf-8") as f:
                    pieces = json.load(f)["pieces"]
                text = "".join(pieces[i] for i in tokens[1:])
                self.assertTrue(text.lstrip().startswith("Once upon a time"), text)


if __name__ == "__main__":
    unittest.main()
