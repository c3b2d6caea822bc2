"""kvsim.dump: imports and parses without torch; with torch + transformers (the GPU machine),
a tiny random Llama is traced and the recorded q/k reproduce the model's own attention."""

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import types
import unittest

import numpy as np

from kvsim import dump
from kvsim import tracefile as tf

from . import llama_ref as ref
from .fake_hf import FakeTensor

PKG_DIR = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "python"))


def torch_problem():
    """None when torch and transformers (with AttentionInterface) import, else the reason."""
    try:
        import torch  # noqa: F401
        from transformers import AttentionInterface, LlamaConfig  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        return f"{type(e).__name__}: {e}"
    return None


def run_python(code, *args):
    env = dict(os.environ, PYTHONPATH=PKG_DIR)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, timeout=120)


class DumpWithoutTorchTest(unittest.TestCase):
    def test_imports_nothing_heavy(self):
        r = run_python("import sys, kvsim, kvsim.dump, kvsim.convert_llama2c\n"
                       "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
                       "print(heavy)")
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "[]"), r.stderr)
        r = run_python("import sys, kvsim; print('h5py' in sys.modules, 'numpy' in sys.modules)")
        self.assertEqual(r.stdout.strip(), "False False", r.stderr)

    def test_missing_torch_is_one_line(self):
        if torch_problem() is None:
            self.skipTest("torch and transformers are importable here")
        with tempfile.TemporaryDirectory() as d:  # the prompts are read (and checked) first
            prompts = os.path.join(d, "p.jsonl")
            with open(prompts, "w") as f:
                f.write('{"prompt": "Once upon"}\n')
            r = run_python("import sys; from kvsim.dump import main; sys.exit(main(sys.argv[1:]))",
                           "--model", "x", "--prompts", prompts, "--out", os.path.join(d, "o.h5"))
        self.assertEqual(r.returncode, 2)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("needs PyTorch and Hugging Face transformers", lines[0])

    def test_read_prompts(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p.jsonl")
            with open(path, "w", encoding="utf-8") as f:
                f.write('{"prompt": "Once upon", "max_new_tokens": 5, "id": "a"}\n\n'
                        '{"ids": [1, 9038, 2501]}\n')
            p = dump.read_prompts(path)
            self.assertEqual(p[0], {"id": "a", "prompt": "Once upon", "ids": None,
                                    "max_new_tokens": 5})
            self.assertEqual(p[1], {"id": 1, "prompt": None, "ids": [1, 9038, 2501],
                                    "max_new_tokens": None})
            bad = {'{"prompt": "x", "ids": [1]}': "exactly one of",
                   '{"ids": []}': "non-empty list", '{"ids": [1, -2]}': "non-empty list",
                   '{"prompt": "x", "max_new_tokens": -1}': "non-negative", "[1]": "exactly one",
                   "{oops": "not valid JSON"}
            for line, msg in bad.items():
                with self.subTest(line=line):
                    with open(path, "w") as f:
                        f.write('{"prompt": "fine"}\n' + line + "\n")
                    with self.assertRaisesRegex(dump.DumpError, f"p.jsonl:2: .*{msg}"):
                        dump.read_prompts(path)
            with open(path, "w") as f:
                f.write("\n")
            with self.assertRaisesRegex(dump.DumpError, "no prompts"):
                dump.read_prompts(path)

    def test_prompt_ids(self):
        class Tokenizer:
            def __call__(self, text):
                return {"input_ids": [1] + [len(w) for w in text.split()]}

        text = {"id": "t", "prompt": "Once upon a time", "ids": None, "max_new_tokens": None}
        ids = {"id": 3, "prompt": None, "ids": [1, 9038, 2501, 263], "max_new_tokens": None}
        self.assertEqual(dump.prompt_ids(text, Tokenizer()), [1, 4, 4, 1, 4])
        self.assertEqual(dump.prompt_ids(text, Tokenizer(), prompt_tokens=3), [1, 4, 4])
        self.assertEqual(dump.prompt_ids(ids, prompt_tokens=4), [1, 9038, 2501, 263])
        with self.assertRaisesRegex(dump.DumpError, "prompt 3: 4 tokens, fewer than --prompt-tokens 5"):
            dump.prompt_ids(ids, prompt_tokens=5)
        with self.assertRaisesRegex(dump.DumpError, "prompt t: text prompt but no tokenizer"):
            dump.prompt_ids(text)

    def test_bad_prompt_tokens_is_one_line(self):
        r = run_python("import sys; from kvsim.dump import main; sys.exit(main(sys.argv[1:]))",
                       "--model", "x", "--prompts", "p.jsonl", "--out", "o.h5", "--prompt-tokens", "0")
        self.assertEqual((r.returncode, r.stderr), (2, "kvsim.dump: --prompt-tokens must be >= 1\n"))

    def test_token_texts(self):
        class SentencePieceLike:
            vocab = ["<unk>", "<s>", "\u2581Once", "\u2581upon", "<0x0A>", "a"]

            def __len__(self):
                return len(self.vocab)

            def convert_ids_to_tokens(self, ids):
                return [self.vocab[i] for i in ids]

        class ByteLevelLike(SentencePieceLike):
            vocab = ["<|bos|>", "\u0120Once", "\u0120upon", "\u010a"]

            def decode(self, ids):
                return "".join(self.vocab[i] for i in ids).replace("\u0120", " ").replace("\u010a", "\n")

        self.assertEqual(dump.token_texts([1, 2, 3, 4], SentencePieceLike()),
                         ["<s>", " Once", " upon", "<0x0A>"])
        self.assertEqual(dump.token_texts([0, 1, 3], ByteLevelLike()), ["<|bos|>", " Once", "\n"])
        self.assertEqual(dump.token_texts([0, 7], pieces=["<unk>", "x"]), ["<unk>", "<7>"])
        self.assertIsNone(dump.token_texts([0, 1]))

    def test_rope_attrs_from_the_config(self):
        ns = types.SimpleNamespace
        llama3 = ns(rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0})
        self.assertEqual(dump.rope_attrs(llama3, 64),
                         {"rope_theta": 500000.0, "rope_scaling_type": "llama3", "rope_scaling_factor": 8.0,
                          "rotary_dims": 64, "rope_pairing": "half"})
        plain = ns(rope_theta=10000.0, rope_scaling=None, partial_rotary_factor=0.5)
        self.assertEqual(dump.rope_attrs(plain, 48),
                         {"rope_theta": 10000.0, "rope_scaling_type": "none", "rope_scaling_factor": 1.0,
                          "rotary_dims": 24, "rope_pairing": "half"})
        self.assertEqual(dump.rope_attrs(ns(), 48), {})

    def test_writer_writes_and_checks_rope_attrs(self):
        import h5py
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.h5")
            rope = {"rope_theta": 10000.0, "rope_scaling_type": "none", "rotary_dims": 4, "rope_pairing": "half"}
            with tf.TraceWriter(path, model="m", source="s", n_layers=1, n_heads=1, n_kv_heads=1,
                                head_dim=4, rope=rope) as w:
                w.write_sequence([1, 2], 1, [{"q": np.ones((1, 2, 4)), "k": np.ones((1, 2, 4))}])
            with h5py.File(path) as f:
                self.assertEqual(float(f.attrs["rope_theta"]), 10000.0)
                self.assertEqual(int(f.attrs["rotary_dims"]), 4)
            with self.assertRaises(ValueError):
                tf.TraceWriter(os.path.join(d, "u.h5"), model="m", source="s", n_layers=1, n_heads=1,
                               n_kv_heads=1, head_dim=4, rope={"rotary_dims": 3})


class RecorderTest(unittest.TestCase):
    """The recording logic (layer bookkeeping, checks, per-layer attrs) with fake tensors."""

    def test_observe_writes_layers(self):
        rng = np.random.default_rng(0)
        meta = {"n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "head_dim": 8, "attn_scale": 0.125}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.h5")
            rec = dump._Recorder()
            with tf.TraceWriter(path, model="fake", source="hf-dump", **meta) as w:
                seq = w.begin_sequence([1, 2, 3, 4, 5], 2)
                rec.start(seq, meta, attn=False)
                qs = [rng.standard_normal((1, 4, 5, 8)) for _ in range(2)]
                ks = [rng.standard_normal((1, 2, 5, 8)) for _ in range(2)]
                mod0 = types.SimpleNamespace(layer_idx=0, scaling=0.125, sliding_window=None)
                mod1 = types.SimpleNamespace(layer_idx=1, scaling=0.125, sliding_window=4096,
                                             attn_logit_softcapping=50.0)
                rec.observe(mod0, FakeTensor(qs[0]), FakeTensor(ks[0]), FakeTensor(ks[0]), 0.125,
                            {"sliding_window": None})
                with self.assertRaisesRegex(dump.DumpError, "layer 0 ran twice"):
                    rec.observe(mod0, FakeTensor(qs[0]), FakeTensor(ks[0]), FakeTensor(ks[0]),
                                0.125, {})
                with self.assertRaisesRegex(dump.DumpError, "scales scores by 0.5"):
                    rec.observe(mod1, FakeTensor(qs[1]), FakeTensor(ks[1]), FakeTensor(ks[1]),
                                0.5, {})
                with self.assertRaisesRegex(dump.DumpError, "differ from the config"):
                    rec.observe(mod1, FakeTensor(qs[1]), FakeTensor(qs[1]), FakeTensor(ks[1]),
                                None, {})
                rec.observe(mod1, FakeTensor(qs[1]), FakeTensor(ks[1]), FakeTensor(ks[1]), None,
                            {"softcap": 30.0})
                rec.stop()
                seq.finish()
            with tf.TraceReader(path) as r:
                np.testing.assert_array_equal(r.q(0, 1, 3), qs[1][0, 3].astype(np.float16))
                np.testing.assert_array_equal(r.k(0, 0, 1), ks[0][0, 1].astype(np.float16))
                self.assertEqual(dict(r.layer(0, 0).attrs), {})
                self.assertEqual(dict(r.layer(0, 1).attrs),
                                 {"sliding_window": 4096, "logit_softcap": 30.0})


class DumpTransformersTest(unittest.TestCase):
    """Runs where torch and transformers are installed (CPU is enough; float32)."""

    def setUp(self):
        problem = torch_problem()
        if problem:
            self.skipTest(f"torch/transformers not importable: {problem}")
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def tiny_llama(self):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                          bos_token_id=1, eos_token_id=2, pad_token_id=0)
        cfg._attn_implementation = "eager"
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg).eval()
        with torch.no_grad():  # larger weights than the init's 0.02 make attention peaky
            for prm in model.parameters():
                prm.normal_(0.0, 0.4 if prm.dim() > 1 else 1.0)
        model.generation_config.eos_token_id = None  # always generate max_new_tokens
        return model

    def eager_reference(self, model, tokens):
        import torch
        dump.set_attn_implementation(model, "eager")
        with torch.no_grad():
            out = model(input_ids=torch.tensor([tokens]), output_attentions=True, use_cache=False)
        return out.logits[0].numpy(), [a[0].numpy() for a in out.attentions]

    def test_tiny_llama_trace_reproduces_attention(self):
        model = self.tiny_llama()
        path = os.path.join(self.dir, "t.h5")
        prompts = [{"id": 0, "prompt": None, "ids": [1, 5, 9, 13, 7], "max_new_tokens": 6},
                   {"id": 1, "prompt": None, "ids": [1, 30, 31], "max_new_tokens": 0}]
        dump.dump_model(model, prompts, path, model_name="tiny-llama", attn=True,
                        store_dtype="float32", pieces=[f"p{i}" for i in range(40)])
        with tf.TraceReader(path) as r:
            m = r.meta
            self.assertEqual((m["source"], m["n_layers"], m["n_heads"], m["n_kv_heads"],
                              m["head_dim"]), ("hf-dump", 2, 4, 2, 8))
            self.assertAlmostEqual(m["attn_scale"], 8 ** -0.5)
            self.assertEqual(r.n_seqs, 2)
            for i, p in enumerate(prompts):
                tokens = r.tokens(i).tolist()
                n = len(tokens)
                self.assertEqual(r.seq_meta(i), {"n_tokens": len(p["ids"]) + p["max_new_tokens"],
                                                 "prompt_len": len(p["ids"])})
                self.assertEqual(tokens[:len(p["ids"])], p["ids"])
                self.assertEqual(r.token_text(i), [f"p{t}" for t in tokens])
                logits, attns = self.eager_reference(model, tokens)
                for t in range(len(p["ids"]) - 1, n - 1):  # greedy continuation
                    self.assertEqual(tokens[t + 1], int(np.argmax(logits[t])))
                for l in range(2):
                    lay = r.layer(i, l)
                    self.assertEqual((lay["q"].shape, lay["k"].shape, lay["v"].shape),
                                     ((4, n, 8), (2, n, 8), (2, n, 8)))
                    self.assertEqual(lay["attn"].shape, (4, n * (n + 1) // 2))
                    for h in range(4):
                        mine = tf.causal_attention(lay["q"][h], lay["k"][h // 2], m["attn_scale"])
                        np.testing.assert_allclose(mine, attns[l][h], atol=1e-5)
                        np.testing.assert_allclose(tf.unpack_tril(lay["attn"][h], n), attns[l][h],
                                                   atol=1e-5)

    def test_converted_llama2c_in_transformers(self):
        import torch
        from transformers import LlamaForCausalLM
        src = os.path.join(self.dir, "m.bin")
        w = ref.write_llama2c_checkpoint(src, np.random.default_rng(5), 16, 24, 2, 4, 2, 11, 8,
                                         shared=False)
        out = os.path.join(self.dir, "hf")
        from kvsim import convert_llama2c
        convert_llama2c.convert(src, out)
        model = LlamaForCausalLM.from_pretrained(out, attn_implementation="eager").float().eval()
        tokens = [1, 5, 9, 2, 7, 7, 3, 10]
        with torch.no_grad():
            hf_logits = model(input_ids=torch.tensor([tokens])).logits[0].double().numpy()
        expect, _ = ref.forward(ref.weights_from_llama2c(w, 2, False), tokens, 4, 2,
                                ref.rope_llama2c)
        np.testing.assert_allclose(hf_logits, expect, atol=1e-4, rtol=1e-4)

    def test_stories15m_in_transformers(self):
        from .test_convert_llama2c import stories15m_path
        path = stories15m_path()
        if not os.path.isfile(path):
            self.skipTest(f"{path} not present")
        import torch
        from transformers import LlamaForCausalLM
        from kvsim import convert_llama2c
        out = os.path.join(self.dir, "stories15M")
        convert_llama2c.convert(path, out)
        model = LlamaForCausalLM.from_pretrained(out, attn_implementation="eager").float().eval()
        tokens = [1, 9038, 2501, 263, 931]  # what llama2.c's tokenizer makes of "Once upon a time"
        with torch.no_grad():
            hf_logits = model(input_ids=torch.tensor([tokens])).logits[0].double().numpy()
        p, w = convert_llama2c.read_checkpoint(path)
        expect, _ = ref.forward(ref.weights_from_llama2c(w, 6, True), tokens, 6, 6,
                                ref.rope_llama2c)
        np.testing.assert_allclose(hf_logits, expect, atol=1e-3, rtol=1e-4)

    def test_cli_on_converted_model_with_ids(self):
        src = os.path.join(self.dir, "m.bin")
        ref.write_llama2c_checkpoint(src, np.random.default_rng(6), 16, 24, 2, 4, 2, 11, 8)
        tok = os.path.join(self.dir, "tokenizer.bin")
        pieces = ["<unk>", "<s>", "</s>"] + [f" w{i}" for i in range(8)]
        ref.write_llama2c_tokenizer(tok, pieces)
        out = os.path.join(self.dir, "hf")
        from kvsim import convert_llama2c
        convert_llama2c.convert(src, out, tok)
        prompts = os.path.join(self.dir, "p.jsonl")
        with open(prompts, "w") as f:
            f.write(json.dumps({"ids": [1, 4, 5], "max_new_tokens": 3}) + "\n")
        trace = os.path.join(self.dir, "t.h5")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            rc = dump.main(["--model", out, "--prompts", prompts, "--out", trace,
                            "--device", "cpu", "--dtype", "float32", "--no-generate"])
        self.assertEqual(rc, 0)
        with tf.TraceReader(trace) as r:
            self.assertEqual(r.meta["model"], "hf")
            self.assertEqual(r.tokens(0).tolist(), [1, 4, 5])
            self.assertEqual(r.token_text(0), ["<s>", " w1", " w2"])
            self.assertEqual(r.layer(0, 1)["q"].dtype, np.float16)


if __name__ == "__main__":
    unittest.main()
