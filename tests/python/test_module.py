"""kvsim from Python (the compiled module kvsim._kvsim): every function, results equal to the
CLI's on the bundled trace (as dicts, and as DataFrames with the CSV's columns where pandas
imports), bad input raising ValueError (kvsim.InputError) with the CLI's one-line message.
Needs the build tree's package on PYTHONPATH (ctest python.module sets it, with KVSIM_EXE
naming the built kvsim) or an installed package (ctest python.installed_package: pip into a
venv, KVSIM_INSTALLED naming it); skipped where only the .py files are importable (unless
KVSIM_REQUIRE_NATIVE=1)."""

import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import kvsim

from tests.python.native import EXE, NATIVE, ROOT, TRACE
INSTALLED = os.environ.get("KVSIM_INSTALLED")  # the venv kvsim is installed in, if it is

try:
    import pandas
except ImportError:
    pandas = None


def cli(*args, check=True):
    r = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"kvsim {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def same_number(csv_text, value):
    """A CSV cell written with %.10g against the value the module returned."""
    if csv_text == "":
        return value is None or (isinstance(value, float) and math.isnan(value))
    return float(csv_text) == float("%.10g" % value)


@unittest.skipUnless(NATIVE, "kvsim._kvsim is not importable (pure-Python package only)")
class ModuleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(EXE):
            raise unittest.SkipTest(f"no kvsim program at {EXE} (set KVSIM_EXE)")
        cls.trace = kvsim.open(TRACE)
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = cls._tmp.name
        kvsim.set_dataframes(False)  # these tests read the dicts; FrameTest the DataFrames

    @classmethod
    def tearDownClass(cls):
        kvsim.set_dataframes(None)
        cls.trace.close()
        cls._tmp.cleanup()

    def out(self, name):
        return os.path.join(self.tmp, name)

    def assert_cli_message(self, verb, cli_args, call):
        """call() raises ValueError whose message is the CLI's line after 'kvsim VERB: '."""
        r = cli(verb, *cli_args, check=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        line = r.stderr.strip()
        self.assertEqual(len(line.splitlines()), 1, line)
        with self.assertRaises(ValueError) as caught:
            call()
        self.assertIsInstance(caught.exception, kvsim.InputError)
        # Policies registered in Python by other tests of this process are known to the module
        # only; the CLI's list of known policies lacks them.
        message = str(caught.exception)
        for name in (p["name"] for p in kvsim.policies() if p["python"]):
            message = message.replace(f", {name})", ")").replace(f", {name},", ",")
        self.assertEqual(f"kvsim {verb}: {message}", line)

    # ---- the trace ----

    def test_info_equals_cli(self):
        cli("info", TRACE, "--json", self.out("info.json"))
        with open(self.out("info.json"), encoding="utf-8") as f:
            expected = json.load(f)
        self.assertEqual(self.trace.info(), expected)
        self.assertEqual(len(self.trace), 8)
        self.assertEqual(self.trace.meta["n_layers"], 6)
        self.assertIn("stories15M", repr(self.trace))

    def test_tokens_and_text_equal_h5py(self):
        from kvsim import tracefile

        with tracefile.TraceReader(TRACE) as ref:
            for seq in (0, 7):
                tokens = self.trace.tokens(seq)
                self.assertEqual(tokens.dtype, np.int32)
                np.testing.assert_array_equal(tokens, ref.tokens(seq))
                self.assertEqual(self.trace.token_text(seq), list(ref.token_text(seq)))
                np.testing.assert_array_equal(self.trace.tensor(seq, 3, "v", 2),
                                              ref.v(seq, 3, 2).astype(np.float32))

    def test_attention_rows(self):
        from kvsim import tracefile

        a = self.trace.attention(1, 2, 3)
        n = self.trace.sequence(1)["n_tokens"]
        self.assertEqual((a.shape, a.dtype), ((n, n), np.float32))
        self.assertTrue(np.all(np.triu(a, 1) == 0))
        np.testing.assert_allclose(a.sum(axis=1), 1, atol=1e-5)
        with tracefile.TraceReader(TRACE) as ref:
            q, k = ref.q(1, 2, 3).astype(np.float64), ref.k(1, 2, 3).astype(np.float64)
            expected = tracefile.causal_attention(q, k, self.trace.meta["attn_scale"])
        np.testing.assert_allclose(a, expected, atol=2e-5)
        packed = self.trace.attention(1, 2, [3, 0], packed=True)
        self.assertEqual(packed.shape, (2, n * (n + 1) // 2))
        np.testing.assert_array_equal(packed[0], a[np.tril(np.ones((n, n), dtype=bool))])
        self.assertEqual(self.trace.attention(1, 2).shape, (6, n, n))

    # ---- replay and sweep against the CLI ----

    def test_replay_equals_cli(self):
        r = kvsim.replay(self.trace, "scissorhands", "20%", seqs=[0, 3], layers="1,4", w=100, threads=2)
        cli("replay", TRACE, "--policy", "scissorhands", "--budget", "20%", "--seqs", "0,3", "--layers", "1,4",
            "--param", "w=100", "--threads", "2", "--csv", self.out("replay.csv"))
        rows = read_csv(self.out("replay.csv"))
        self.assertEqual([row["layer"] for row in rows], ["1", "4", "all"])
        self.assertEqual((r["label"], r["params"]), ("scissorhands(w=100)", "w=100"))
        for i, row in enumerate(rows[:2]):
            self.assertEqual(int(row["layer"]), r["layers"]["layer"][i])
            for column in ("retention_mean", "retention_p5", "retention_min", "output_error_mean",
                           "output_error_p95", "occupancy_mean"):
                self.assertTrue(same_number(row[column], r["layers"][column][i]), (column, row[column]))
        for column in ("retention_mean", "retention_p5", "retention_min", "output_error_mean", "output_error_p95",
                       "occupancy_mean"):
            self.assertTrue(same_number(rows[2][column], r[column]), column)

        # The per-step records add up to the summary.
        self.assertEqual(sorted(r["groups"]), [(s, l, g) for s in (0, 3) for l in (1, 4) for g in range(6)])
        retention = np.concatenate([g["retention"].ravel() for g in r["groups"].values()])
        self.assertEqual(retention.size, r["samples"])
        self.assertAlmostEqual(float(retention.astype(np.float64).mean()), r["retention_mean"], places=12)
        self.assertEqual(sum(g["evictions"] for g in r["groups"].values()), r["evictions"])
        g = r["groups"][(3, 4, 2)]
        n = self.trace.sequence(3)["n_tokens"]
        self.assertEqual(g["retention"].shape, (1, n))
        self.assertEqual(g["output_error"].shape, (1, n))
        self.assertEqual(g["eviction_step"].shape, (n,))
        self.assertEqual(g["budget"], n * 20 // 100)
        self.assertLessEqual(int(g["occupancy"].max()), g["budget"] + 1)
        np.testing.assert_array_equal(g["steps"], np.arange(n))
        evicted = g["eviction_step"]
        self.assertEqual(int((evicted >= 0).sum()), g["evictions"])
        self.assertTrue(np.all(evicted[evicted >= 0] >= np.arange(n)[evicted >= 0]))

    def test_replay_layer_wide_and_prefill(self):
        r = kvsim.replay(TRACE, "tova", 32, seqs=0, layers=[5], mode="prefill", records=True)
        self.assertEqual(list(r["groups"]), [(0, 5, 0)])
        g = r["groups"][(0, 5, 0)]
        self.assertTrue(g["layer_wide"])
        self.assertEqual(list(g["heads"]), list(range(6)))
        prompt = self.trace.sequence(0)["prompt_len"]
        self.assertEqual(g["first_step"], prompt)
        self.assertEqual(g["retention"].shape, (6, self.trace.sequence(0)["n_tokens"] - prompt))
        self.assertEqual(r["mode"], "prefill")
        no_records = kvsim.replay(TRACE, "tova", 32, seqs=0, layers=[5], mode="prefill", records=False)
        self.assertEqual(no_records["groups"], {})
        self.assertEqual(no_records["retention_mean"], r["retention_mean"])

    def test_kvpress_names_and_compression_ratio(self):
        # SnapKVPress is snapkv; R 0.5 keeps half of each prompt (docs/semantics.md, section 2).
        prompt = self.trace.sequence(0)["prompt_len"]
        r = kvsim.replay(TRACE, "SnapKVPress", compression_ratio=0.5, seqs=0, layers=[5], mode="prefill",
                         as_frame=False, records=False)
        self.assertEqual(r["policy"], "snapkv")
        self.assertEqual(r["budget"], "ratio 0.5")
        self.assertEqual(r["budget_tokens_mean"], prompt // 2)
        s = kvsim.sweep(TRACE, ["snapkv_press"], compression_ratio=[0.5, 0.25], seqs=0, layers=[5], mode="prefill",
                        as_frame=False)
        self.assertEqual(list(s["budget"]), ["ratio 0.5", "ratio 0.25"])
        with self.assertRaisesRegex(kvsim.InputError, "needs --mode prefill"):
            kvsim.replay(TRACE, "snapkv", compression_ratio=0.5, seqs=0)
        with self.assertRaisesRegex(kvsim.InputError, "give one"):
            kvsim.sweep(TRACE, ["snapkv"], budgets=[8], compression_ratio=0.5, mode="prefill")
        with self.assertRaisesRegex(kvsim.InputError, r"\[0, 1\)"):
            kvsim.replay(TRACE, "snapkv", compression_ratio=1, seqs=0, mode="prefill")

    def test_layout_columns_equal_what_survival_implies(self):
        # h2o at 20% on the bundled trace: a position is held by a layer's paged cache at step t
        # while any kv head holds it (evicted at t or later, or never), by the sequence's while
        # any layer does; the dense cache holds its fullest kv head's positions.
        cli("sweep", TRACE, "--policies", "h2o", "--budgets", "20%", "--csv", self.out("layout.csv"),
            "--survival", self.out("survival.csv"))
        row = read_csv(self.out("layout.csv"))[0]
        last = {}  # (seq, layer) -> per kv head, per position: the last step it was held
        with open(self.out("survival.csv"), newline="") as f:
            for r in csv.DictReader(f):
                step = int(r["eviction_step"])
                heads = last.setdefault((int(r["seq"]), int(r["layer"])), {})
                heads.setdefault(r["group"], []).append(np.inf if step < 0 else step)

        def held(last_steps):  # per step t: positions p <= t held at t
            n = last_steps.shape[-1]
            t = np.arange(n)
            return np.array([np.sum(last_steps[: s + 1] >= s) for s in t])

        dense, layer, model = [], [], []
        by_sequence = {}
        for (seq, _), heads in sorted(last.items()):
            steps = np.array([heads[g] for g in sorted(heads)])
            dense.append(np.max([held(h) for h in steps], axis=0))
            union = steps.max(axis=0)
            layer.append(held(union))
            by_sequence[seq] = np.maximum(by_sequence.get(seq, union), union)
        model = [held(u) for u in by_sequence.values()]
        for name, values in (("dense", dense), ("layer_union", layer), ("model_union", model)):
            every = np.concatenate(values)
            self.assertAlmostEqual(float(row[f"occupancy_{name}_mean"]), every.mean(), places=6, msg=name)
            self.assertEqual(int(float(row[f"occupancy_{name}_peak"])), int(every.max()), name)

    def test_sweep_equals_cli(self):
        s = kvsim.sweep(self.trace, ["scissorhands", "h2o", "tova", "oracle", "scissorhands-official"],
                        "10%,50%,64", seqs=[1, 2], params={"scissorhands.w": 50}, threads=2)
        cli("sweep", TRACE, "--policies", "scissorhands,h2o,tova,oracle,scissorhands-official",
            "--budgets", "10%,50%,64", "--seqs", "1,2", "--param", "scissorhands.w=50", "--threads", "2",
            "--csv", self.out("sweep.csv"))
        rows = read_csv(self.out("sweep.csv"))
        self.assertEqual(list(s)[:len(rows[0])], list(rows[0].keys()))  # same columns, same order
        self.assertEqual({len(v) for v in s.values()}, {len(rows)})
        for i, row in enumerate(rows):
            for column, text in row.items():
                value = s[column][i]
                if isinstance(value, str):
                    self.assertEqual(value, text, (i, column))
                else:
                    self.assertTrue(same_number(text, value), (i, column, text, value))
        self.assertEqual(s["label"][0], "scissorhands(w=50)")
        self.assertEqual(s["retention_mean"].dtype, np.float64)
        self.assertEqual(s["evictions"].dtype, np.int64)

    def test_sweep_protocols_equal_cli(self):
        # --question and --compress-every: the same columns (the question's after the others)
        # and numbers as the CLI's CSV; without a question no question column.
        s = kvsim.sweep(self.trace, "h2o,snapkv", "8,20%", seqs=[0, 1], mode="prefill", question=8,
                        compress_every=4, threads=2)
        cli("sweep", TRACE, "--policies", "h2o,snapkv", "--budgets", "8,20%", "--seqs", "0,1", "--mode", "prefill",
            "--question", "8", "--compress-every", "4", "--threads", "2", "--csv", self.out("protocols.csv"))
        rows = read_csv(self.out("protocols.csv"))
        self.assertEqual(list(s)[:len(rows[0])], list(rows[0].keys()))
        self.assertEqual(list(rows[0].keys())[-4:], ["question_retention_mean", "question_retention_min",
                                                     "answer_retention_mean", "answer_retention_min"])
        for i, row in enumerate(rows):
            for column, text in row.items():
                value = s[column][i]
                if not isinstance(value, str):
                    self.assertTrue(same_number(text, value), (i, column, text, value))
        plain = kvsim.sweep(self.trace, "h2o", "8", seqs=[0], mode="prefill")
        self.assertNotIn("question_retention_mean", plain)
        r = kvsim.replay(self.trace, "tova", "8", seqs=[0], mode="prefill", question=8)
        self.assertIn("answer_retention_mean", r)
        self.assert_cli_message("sweep", [TRACE, "--policies", "h2o", "--budgets", "8", "--question", "8"],
                                lambda: kvsim.sweep(self.trace, "h2o", "8", question=8))
    def test_threshold_equals_cli(self):
        # threshold= and threshold_window= reach the engine as --threshold and --window do; a
        # policy's own window parameter stays a policy parameter.
        s = kvsim.sweep(self.trace, "h2o,observed-attention", "8,20%", seqs=[0, 1], threshold=0.5,
                        threshold_window=32)
        cli("sweep", TRACE, "--policies", "h2o,observed-attention", "--budgets", "8,20%", "--seqs", "0,1",
            "--threshold", "0.5", "--window", "32", "--csv", self.out("threshold.csv"))
        rows = read_csv(self.out("threshold.csv"))
        for i, row in enumerate(rows):
            for column, text in row.items():
                value = s[column][i]
                if not isinstance(value, str):
                    self.assertTrue(same_number(text, value), (i, column, text, value))
        full = kvsim.replay(self.trace, "h2o", "8", seqs=[0], threshold=0, as_frame=False, records=False)
        self.assertEqual(full["evictions"], 0)
        snapkv = kvsim.replay(self.trace, "snapkv", "8", seqs=[0], threshold=1, threshold_window=16, window=4,
                              as_frame=False, records=False)
        cli("replay", TRACE, "--policy", "snapkv", "--budget", "8", "--seqs", "0", "--threshold", "1", "--window", "16",
            "--param", "window=4", "--json", self.out("snapkv.json"))
        with open(self.out("snapkv.json"), encoding="utf-8") as f:
            self.assertEqual(json.load(f)["cells"][0]["evictions"], snapkv["evictions"])
        self.assert_cli_message("replay", [TRACE, "--policy", "recent", "--threshold", "1"],
                                lambda: kvsim.replay(self.trace, "recent", "8", threshold=1))

    def test_protect_equals_cli(self):
        # protect= reaches the engine as --protect does; the bundled trace has no spans.
        self.assert_cli_message("sweep", [TRACE, "--policies", "h2o", "--budgets", "8", "--protect", "context:2"],
                                lambda: kvsim.sweep(self.trace, "h2o", "8", protect="context:2"))
        qa = self.out("qa.h5")
        made = cli("capture", "--context", "Lily had a red ball. She lost it in the park.", "--question",
                   "Who lost the ball?", "--tokens", "40", "--out", qa, check=False)
        if made.returncode != 0:
            self.skipTest("no model to capture a trace with spans: " + made.stderr)
        cli("sweep", qa, "--policies", "h2o,snapkv,oracle", "--budgets", "6,30%", "--mode", "prefill", "--question",
            "auto", "--protect", "context:3", "--protect", "question:1", "--csv", self.out("protect.csv"))
        for rules in (["context:3", "question:1"], {"context": 3, "question": 1}):
            s = kvsim.sweep(qa, "h2o,snapkv,oracle", "6,30%", mode="prefill", question="auto", protect=rules)
            for i, row in enumerate(read_csv(self.out("protect.csv"))):
                for column, text in row.items():
                    value = s[column][i]
                    if not isinstance(value, str):
                        self.assertTrue(same_number(text, value), (i, column, text, value))
        plain = kvsim.replay(qa, "snapkv", 6, mode="prefill", question="auto", as_frame=False, records=False)
        kept = kvsim.replay(qa, "snapkv", 6, mode="prefill", question="auto", protect="context:3", as_frame=False,
                            records=False)
        self.assertGreater(kept["occupancy_mean"], plain["occupancy_mean"])  # the window fills B: 3 more stay

    def test_spans_equal_cli(self):
        # attrs["spans"] and span_step= as the replay JSON's cells[0].spans and --span-step.
        qa = self.out("qa-spans.h5")
        made = cli("capture", "--context", "Lily had a red ball. She lost it in the park.", "--question",
                   "Who lost the ball?", "--tokens", "40", "--out", qa, check=False)
        if made.returncode != 0:
            self.skipTest("no model to capture a trace with spans: " + made.stderr)
        for step in (None, 20):
            extra = [] if step is None else ["--span-step", str(step)]
            cli("replay", qa, "--policy", "h2o", "--budget", "6", "--mode", "prefill", "--question", "auto",
                "--json", self.out("spans.json"), *extra)
            with open(self.out("spans.json"), encoding="utf-8") as f:
                shown = json.load(f)["cells"][0]["spans"]
            frame = kvsim.replay(qa, "h2o", 6, mode="prefill", question="auto", span_step=step, as_frame=True)
            spans = frame.attrs["spans"]
            self.assertEqual(len(spans), len(shown))
            self.assertEqual(sorted(spans.columns), sorted(shown[0].keys()))
            for i, span in enumerate(shown):
                for key, value in span.items():
                    got = spans[key][i]
                    if value is None:
                        self.assertTrue(math.isnan(got), (i, key, got))
                    else:
                        self.assertEqual(got, value, (i, key))
            self.assertEqual(spans["step"][0], 20 if step is not None else 15)  # the question span's start

    def test_budgets_that_move_equal_cli(self):
        # --layer-budget pyramid / cake, --head-budget adaptive and --share reach the engine the same way.
        gqa = self.out("gqa.h5")
        cli("synth", gqa, "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--tokens", "96",
            "--seqs", "1")
        for trace, extra, options in [
                (TRACE, ["--layer-budget", "pyramid"], {"layer_budget": "pyramid"}),
                (TRACE, ["--layer-budget", "cake:tau1=1.6:tau2=0.4"], {"layer_budget": "cake:tau1=1.6:tau2=0.4"}),
                (gqa, ["--head-budget", "adaptive", "--head-floor", "0.3", "--mode", "prefill"],
                 {"head_budget": "adaptive", "head_floor": 0.3, "mode": "prefill"}),
                (gqa, ["--share", "layer", "--share-score", "max"], {"share": "layer", "share_score": "max"}),
                (TRACE, ["--share", "model"], {"share": "model"})]:
            s = kvsim.sweep(trace, ["h2o", "snapkv"], "40", seqs=[0], **options)
            cli("sweep", trace, "--policies", "h2o,snapkv", "--budgets", "40", "--seqs", "0", "--csv",
                self.out("moving.csv"), *extra)
            rows = read_csv(self.out("moving.csv"))
            for i, row in enumerate(rows):
                for column in ("retention_mean", "occupancy_peak", "evictions"):
                    self.assertTrue(same_number(row[column], s[column][i]), (extra, i, column))

    def test_share_refusals_equal_cli(self):
        self.assert_cli_message("sweep", [TRACE, "--policies", "recent", "--budgets", "8", "--share", "layer"],
                                lambda: kvsim.sweep(TRACE, "recent", "8", share="layer"))
        self.assert_cli_message("replay", [TRACE, "--policy", "h2o", "--budget", "8", "--share-score", "median"],
                                lambda: kvsim.replay(TRACE, "h2o", 8, share_score="median"))

    def test_sweep_quant_adds_rows(self):
        s = kvsim.sweep(TRACE, "h2o", ["20%"], seqs=[0], layers=[0], quant="flexgen4")
        self.assertEqual(s["quant"], ["none", "flexgen4"])
        self.assertEqual(list(s["bits_per_element"]), [16.0, 4.0 + 32 / 48])

    def test_ctrl_c_stops_a_sweep(self):
        import _thread
        import threading
        import time

        timer = threading.Timer(0.3, _thread.interrupt_main)
        start = time.monotonic()
        timer.start()
        try:
            with self.assertRaises(KeyboardInterrupt):
                kvsim.sweep(self.trace, threads=1)  # the whole default grid: many seconds
        finally:
            timer.cancel()
        self.assertLess(time.monotonic() - start, 10)

    # ---- rows given as arrays ----

    def test_replay_rows_with_a_question(self):
        # tests/sim/test_protocols.cpp's hand-worked case: trace C, prompt 6 with a 2-token
        # question, TOVA at B=2: the context compressed to {0, 2} at t3, nothing evicted after.
        c = [[1.0], [0.5, 0.5], [0.3, 0.2, 0.5], [0.3, 0.1, 0.4, 0.2], [0.24, 0.05, 0.36, 0.05, 0.3],
             [0.2, 0.05, 0.3, 0.05, 0.1, 0.3], [0.15, 0.05, 0.25, 0.05, 0.05, 0.35, 0.1],
             [0.12, 0.02, 0.25, 0.03, 0.05, 0.3, 0.08, 0.15]]
        rows = np.zeros((1, 8, 8), dtype=np.float32)
        for t, row in enumerate(c):
            rows[0, t, :t + 1] = row
        r = kvsim.replay_rows(rows, "tova", 2, mode="prefill", prompt_len=6, question=2)
        np.testing.assert_allclose(r["retention"][0], [0.9, 0.9, 0.9, 0.95], atol=2e-6)
        self.assertEqual(r["groups"][0]["question_steps"], 2)
        self.assertEqual(list(r["groups"][0]["eviction_step"]), [-1, 3, -1, 3, -1, -1, -1, -1])
        with self.assertRaises(kvsim.InputError):
            kvsim.replay_rows(rows, "tova", 2, question=2)  # stream mode
        # A prompt of every row leaves no step to measure: refused, as the CLI refuses it.
        with self.assertRaisesRegex(kvsim.InputError, "prompt_len 8 leaves no decoding steps to measure"):
            kvsim.replay_rows(rows, "tova", 2, mode="prefill", prompt_len=8)

    def test_replay_rows_equals_trace_replay(self):
        seq, layer = 2, 3
        rows = self.trace.attention(seq, layer)  # [6, n, n]
        r = kvsim.replay(self.trace, "h2o", "25%", seqs=[seq], layers=[layer])
        mine = kvsim.replay_rows(rows, "h2o", "25%")
        self.assertEqual(mine["budget"], r["groups"][(seq, layer, 0)]["budget"])
        self.assertEqual(mine["retention"].shape, (6, rows.shape[1]))
        for g in range(6):
            expected = r["groups"][(seq, layer, g)]
            got = mine["groups"][g]
            np.testing.assert_allclose(got["retention"], expected["retention"], atol=1e-6)
            np.testing.assert_array_equal(mine["retention"][g], got["retention"][0])
            np.testing.assert_array_equal(got["eviction_step"], expected["eviction_step"])
        # Seeded policies draw as replay() does for the rows' origin.
        random = kvsim.replay(self.trace, "random", "25%", seqs=[seq], layers=[layer], seed=3)
        mine_random = kvsim.replay_rows(rows[2:4], "random", "25%", origin=(seq, layer, 2), seed=3)
        for g in range(2):
            np.testing.assert_array_equal(mine_random["groups"][g]["eviction_step"],
                                          random["groups"][(seq, layer, 2 + g)]["eviction_step"])
        # Packed rows are the same rows.
        n = rows.shape[1]
        packed = rows[:, np.tril(np.ones((n, n), dtype=bool))]
        np.testing.assert_array_equal(kvsim.replay_rows(packed, "h2o", "25%")["retention"], mine["retention"])
        # Values give the output error, as the trace's v do.
        values = np.stack([self.trace.tensor(seq, layer, "v", g) for g in range(6)])
        with_values = kvsim.replay_rows(rows, "h2o", "25%", values=values)
        self.assertIsNone(mine["output_error"])
        np.testing.assert_allclose(with_values["output_error"][4], r["groups"][(seq, layer, 4)]["output_error"][0],
                                   atol=1e-5)

    def test_scissorhands_official_is_the_authors_loop(self):
        """From Python, on the trace and on rows given as an array, with the layers parameter."""
        from tests.python.authors_scissorhands import authors_masks, eviction_steps

        rng = np.random.default_rng(3)
        heads, n = 3, 90
        logits = (rng.normal(size=(heads, n, n)) * 2.5).astype(np.float32)
        logits[np.broadcast_to(np.triu(np.ones((n, n), dtype=bool), 1), logits.shape)] = np.finfo(np.float32).min
        masked, rows, _ = authors_masks(logits, window=12, recent=4, start=20)
        got = kvsim.replay_rows(rows, "scissorhands-official", 1, window=12, recent=4, start=20)
        expected = eviction_steps(masked)
        self.assertGreater(int((expected >= 0).sum()), 100)
        for h in range(heads):
            np.testing.assert_array_equal(got["groups"][h]["eviction_step"], expected[h])
        # The layers parameter: layer 3 compressed, layer 4 left whole.
        r = kvsim.replay(self.trace, "scissorhands-official", 1, seqs=[0], layers=[3, 4], params={"layers": "0-3"})
        self.assertGreater(r["groups"][(0, 3, 0)]["evictions"], 0)
        self.assertEqual(r["groups"][(0, 4, 0)]["evictions"], 0)
        with self.assertRaises(kvsim.InputError):
            kvsim.replay(self.trace, "scissorhands-official", 1, seqs=[0], params={"layers": "3-1"})

    def test_replay_rows_equals_a_written_trace(self):
        """Rows given as an array replay exactly as the same rows stored as a trace's attn."""
        from kvsim import tracefile

        rng = np.random.default_rng(7)
        heads, kv, n = 4, 2, 40
        logits = rng.normal(size=(heads, n, n)) * 2
        logits[..., 0] += 3  # a sink
        mask = np.tril(np.ones((n, n), dtype=bool))
        p = np.where(mask, np.exp(np.where(mask, logits, -np.inf)), 0)
        p = (p / p.sum(axis=-1, keepdims=True)).astype(np.float32)
        path = self.out("mine.h5")
        with tracefile.TraceWriter(path, model="mine", source="synthetic", n_layers=1, n_heads=heads,
                                   n_kv_heads=kv, head_dim=8, dtype="float32") as w:
            seq = w.begin_sequence(np.arange(n, dtype=np.int32), prompt_len=5)
            seq.write_layer(0, attn=tracefile.pack_tril(p))
            seq.finish()
        for policy, params in (("scissorhands", {"w": 8, "r": 2}), ("tova", {}), ("snapkv", {"window": 4}),
                               ("oracle", {})):
            from_file = kvsim.replay(path, policy, 10, **params)
            from_array = kvsim.replay_rows(p, policy, 10, n_kv_heads=kv, **params)
            for key, group in from_file["groups"].items():
                mine = from_array["groups"][key[2]]
                np.testing.assert_array_equal(mine["retention"], group["retention"], policy)
                np.testing.assert_array_equal(mine["eviction_step"], group["eviction_step"], policy)
                np.testing.assert_array_equal(mine["occupancy"], group["occupancy"], policy)
            self.assertEqual(from_array["retention_mean"], from_file["retention_mean"])
        # knorm reads keys: an attention-only trace, and rows alone, are refused in one line.
        with self.assertRaisesRegex(kvsim.InputError, r"/seqs/0/layers/0: policy knorm needs k \(keys\); "
                                                      r"the layer has only attn$"):
            kvsim.replay(path, "knorm", 10)
        with self.assertRaisesRegex(kvsim.InputError, "policy knorm reads the stored keys"):
            kvsim.replay_rows(p, "knorm", 10, n_kv_heads=kv)
        prefill = kvsim.replay_rows(p.astype(np.float64), "h2o", 10, n_kv_heads=kv, mode="prefill", prompt_len=5)
        self.assertEqual(prefill["retention"].shape, (heads, n - 5))
        np.testing.assert_array_equal(
            prefill["retention"],
            np.concatenate([g["retention"] for g in
                            kvsim.replay(path, "h2o", 10, mode="prefill")["groups"].values()]))

    def test_analyze_equals_cli(self):
        a = kvsim.analyze(self.trace, seqs=[0, 5], layers=[1, 2], lags=[1, 16], threads=2)
        cli("analyze", TRACE, "--seqs", "0,5", "--layers", "1,2", "--lags", "1,16", "--threads", "2",
            "--csv", self.out("analyze.csv"))
        rows = read_csv(self.out("analyze.csv"))
        tables = [a["heads"], a["layer_means"], {k: [v] for k, v in a["overall"].items()}]
        mine = []
        for table in tables:
            for i in range(len(table["layer"])):
                mine.append({k: table[k][i] for k in table})
        self.assertEqual(len(mine), len(rows))
        for got, row in zip(mine, rows):
            self.assertEqual(row["layer"], "all" if got["layer"] == -1 else str(got["layer"]))
            self.assertEqual(row["head"], "mean" if got["head"] == -1 else str(got["head"]))
            for column, text in row.items():
                if column not in ("layer", "head"):
                    self.assertTrue(same_number(text, got[column]), (column, text, got[column]))
        self.assertEqual(list(a["cross_layer"]["layer_a"]), [1])
        self.assertEqual(len(a["per_sequence"]["persistence"]), 2 * 2 * 6)
        self.assertEqual(len(a["persistence_weights"]), 2)

    def test_analyze_rows(self):
        a = kvsim.analyze(TRACE, seqs=[4], layers=[0], lags=(1, 4))
        rows = self.trace.attention(4, 0)
        mine = kvsim.analyze(rows, lags=(1, 4))  # an array goes to analyze_rows
        for column in ("early", "late", "persistent", "persistence", "ever_pivotal", "spearman_lag1",
                       "topk_recall_lag4"):
            np.testing.assert_allclose(mine["heads"][column], a["per_sequence"][column], atol=1e-9, err_msg=column)
        self.assertEqual(mine["importance"].shape, (rows.shape[1],))

    def test_need_equals_cli(self):
        cli("analyze", TRACE, "--seqs", "0,3", "--layers", "1,2", "--need", "0.9,0.99", "--json", self.out("need.json"))
        with open(self.out("need.json"), encoding="utf-8") as f:
            want = json.load(f)["need"]
        got = kvsim.need(TRACE, p="0.99,0.9", seqs=[0, 3], layers=[1, 2], as_frame=False)
        self.assertEqual(list(got["p"]), [0.9, 0.99])
        rows = [(layer["layer"], m) for layer in want["layers"] for m in layer["need"]]
        self.assertEqual(list(got["layers"]["layer"]), [layer for layer, _ in rows])
        for column in ("count", "mean", "p95", "max"):
            self.assertEqual(list(got["layers"][column]), [m[column] for _, m in rows], column)
        self.assertEqual(got["budget"], [b["budget"] for b in want["budgets"]])
        self.assertEqual([list(p) for p in got["peak"]], [b["peak"] for b in want["budgets"]])
        self.assertEqual(len(got["step_mean"][0]), 256)

    # ---- planning ----

    def test_plan_equals_cli(self):
        got = kvsim.plan("llama-3.1-8b", "h100-80gb", context=4096, budget=["20%", 512], kv_quant="flexgen4")
        cli("plan", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--context", "4096", "--budget", "20%,512",
            "--kv-quant", "flexgen4", "--json", self.out("plan.json"))
        with open(self.out("plan.json"), encoding="utf-8") as f:
            self.assertEqual(got, json.load(f))

        cli("sweep", TRACE, "--policies", "scissorhands,h2o,oracle", "--budgets", "20%,40%,60%", "--seqs", "0",
            "--csv", self.out("plan-sweep.csv"))
        got = kvsim.plan("Llama-3.1-8B", "h100-80gb", gpus=2, context=[1024, 4096, 3000], sweep=self.out("plan-sweep.csv"),
                         target="retention>=0.9")
        with open(self.out("contexts.csv"), "w", encoding="utf-8") as f:
            f.write("1024\n4096\n3000\n")
        cli("plan", "--model", "Llama-3.1-8B", "--gpu", "h100-80gb", "--gpus", "2", "--context",
            self.out("contexts.csv"), "--sweep", self.out("plan-sweep.csv"), "--target", "retention>=0.9",
            "--json", self.out("plan2.json"))
        with open(self.out("plan2.json"), encoding="utf-8") as f:
            self.assertEqual(got, json.load(f))
        # The table as the CLI prints it.
        table = kvsim.plan_text("Llama-3.1-8B", "h100-80gb", gpus=2, context=self.out("contexts.csv"),
                                sweep=self.out("plan-sweep.csv"), target="retention>=0.9")
        printed = cli("plan", "--model", "Llama-3.1-8B", "--gpu", "h100-80gb", "--gpus", "2", "--context",
                      self.out("contexts.csv"), "--sweep", self.out("plan-sweep.csv"), "--target", "retention>=0.9")
        self.assertEqual(table, printed.stdout)
        # A sweep() result plans as its CSV does. Its rows reach the planner as they are, not
        # through CSV text, so its numbers are the CSV's before their rounding to 10 digits.
        s = kvsim.sweep(TRACE, "scissorhands,h2o,oracle", "20%,40%,60%", seqs=[0])
        from_columns = kvsim.plan("llama-3.1-8b", "h100-80gb", gpus=2, context=[1024, 4096, 3000], sweep=s,
                                  target="retention>=0.9")
        self.assertEqual(len(from_columns["rows"]), len(got["rows"]))
        for mine, theirs in zip(from_columns["rows"], got["rows"]):
            self.assertEqual(mine.keys(), theirs.keys())
            for key, value in theirs.items():
                if isinstance(value, float):
                    self.assertAlmostEqual(mine[key], value, delta=1e-9 * max(1.0, abs(value)), msg=key)
                else:
                    self.assertEqual(mine[key], value, key)
        with self.assertRaisesRegex(kvsim.InputError, "the columns retention_mean are missing"):
            kvsim.plan("llama-3.1-8b", "h100-80gb", sweep={k: v for k, v in s.items() if k != "retention_mean"})
        self.assertEqual(list(s)[:len(kvsim.SWEEP_COLUMNS)], list(kvsim.SWEEP_COLUMNS))
        self.assertEqual([r["policy"] for r in got["rows"]], ["full", "scissorhands", "h2o", "oracle"])

    # ---- the guide's example ----

    def test_readme_example_runs_as_written(self):
        """Each python block of docs/guide.md's "From Python" runs and prints the output shown after
        it (the first with or without pandas, the second, of DataFrames, where pandas imports)."""
        with open(os.path.join(ROOT, "docs", "guide.md"), encoding="utf-8") as f:
            readme = f.read()
        section = readme[readme.index("\n## From Python\n"):]
        section = section[:section.index("\n## ", 1)]
        examples = [part.split("```\n", 1) for part in section.split("```python\n")[1:]]
        self.assertEqual(len(examples), 2)
        for i, (code, after) in enumerate(examples):
            if i == 1 and pandas is None:
                continue
            shown = after.split("```\n", 1)[1].split("```\n", 1)[0].splitlines()
            env = dict(os.environ, MPLBACKEND="Agg")
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=self.tmp, env=env,
                               timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            printed = [line.replace(kvsim.data_dir(), "/path/to/kvsim/data") for line in r.stdout.splitlines()]
            self.assertEqual(printed, shown)

    # ---- the rest ----

    def test_policies_and_data(self):
        names = [p["name"] for p in kvsim.policies() if not p["python"]]  # the CLI has no Python policies
        listed = cli("policies").stdout
        for name in names:
            self.assertIn(name, listed)
        scissorhands = next(p for p in kvsim.policies() if p["name"] == "scissorhands")
        self.assertEqual({p["name"]: p["default"] for p in scissorhands["params"]}["w"], "400")
        # The policies with their own budget mechanisms say which (docs/semantics.md, section 2).
        own = {p["name"]: (p["layer_budget"], p["head_floor"]) for p in kvsim.policies()}
        self.assertEqual(own["pyramidkv"], ("pyramid:beta=20:window=32", None))
        self.assertEqual(own["cake"], ("cake:tau1=1:tau2=1:window=32", None))
        self.assertEqual(own["ada-snapkv"], (None, 0.2))
        self.assertEqual(own["ada-h2o"], (None, 0.2))
        self.assertEqual(own["snapkv"], (None, None))
        # They run from Python as in the CLI (their schedules set as the CLI sets them).
        cells = kvsim.sweep(TRACE, policies=["pyramidkv", "ada-h2o", "cake"], budgets=["20%"], seqs=[0])
        self.assertEqual(list(cells["policy"]), ["pyramidkv", "ada-h2o", "cake"])
        data = os.path.join(INSTALLED, "share", "kvsim") if INSTALLED else os.path.join(ROOT, "data")
        self.assertEqual(os.path.realpath(kvsim.data_dir()), os.path.realpath(data))
        self.assertTrue(os.path.exists(kvsim.bundled_trace()))
        if INSTALLED:  # the installed package, not the source or build tree's
            for path in (kvsim.__file__, kvsim._kvsim.__file__, EXE):
                self.assertTrue(os.path.realpath(path).startswith(os.path.realpath(INSTALLED) + os.sep), path)

    def test_bad_input_raises_the_cli_message(self):
        missing = self.out("missing.h5")
        self.assert_cli_message("info", [missing], lambda: kvsim.open(missing))
        self.assert_cli_message("replay", [TRACE, "--policy", "nope"], lambda: kvsim.replay(TRACE, "nope", "20%"))
        self.assert_cli_message("replay", [TRACE, "--budget", "0%"], lambda: kvsim.replay(TRACE, "scissorhands", "0%"))
        self.assert_cli_message("replay", [TRACE, "--param", "w=0"],
                                lambda: kvsim.replay(TRACE, "scissorhands", "20%", w=0))
        self.assert_cli_message("replay", [TRACE, "--seqs", "9"], lambda: kvsim.replay(TRACE, "h2o", "20%", seqs=[9]))
        self.assert_cli_message("sweep", [TRACE, "--policies", "h2o", "--param", "w=3"],
                                lambda: kvsim.sweep(TRACE, "h2o", w=3))
        self.assert_cli_message("analyze", [TRACE, "--topk", "x"], lambda: kvsim.analyze(TRACE, topk="x"))
        self.assert_cli_message("plan", ["--model", "gpt-9", "--gpu", "h100-80gb"],
                                lambda: kvsim.plan("gpt-9", "h100-80gb"))

    def test_bad_arrays_raise_value_error(self):
        p = np.tril(np.ones((2, 5, 5), dtype=np.float32))
        p /= p.sum(axis=-1, keepdims=True)
        upper = p.copy()
        upper[1, 0, 3] = 0.5
        nan = p.copy()
        nan[0, 2, 1] = np.nan
        cases = [
            (p * 1.1, "attention: row 0 of head 0 sums to 1.100000 (expected 1 within 1e-3)"),
            (upper, "attention: not causal: nonzero attention above the diagonal at head 1, row 0, position 3"),
            (nan, "attention: NaN at head 0, row 2, position 1"),
            (np.ones((2, 7), dtype=np.float32), "attention: a packed row set holds n(n+1)/2 values; 7 is not such a number"),
            (np.ones((2, 3, 4), dtype=np.float32), "attention: a [heads, n, n] array needs square matrices, got [2, 3, 4]"),
        ]
        for array, message in cases:
            with self.assertRaises(ValueError) as caught:
                kvsim.replay_rows(array, "h2o", 2)
            self.assertEqual(str(caught.exception), message)
        with self.assertRaises(ValueError) as caught:
            kvsim.replay_rows(p, "h2o", 2, n_kv_heads=3)
        self.assertEqual(str(caught.exception), "the number of heads (2) must be a multiple of the kv heads (3)")
        with self.assertRaises(ValueError):
            kvsim.replay_rows(p, "h2o", 2, values=np.zeros((2, 4, 8)))
        with self.assertRaises(ValueError):
            kvsim.replay_rows(p, "h2o", 2, mode="prefill")  # no prompt length
        with self.assertRaises(ValueError):
            self.trace.attention(0, 6, 0)
        closed = kvsim.open(TRACE)
        closed.close()
        with self.assertRaises(ValueError):
            closed.tokens(0)


@unittest.skipUnless(NATIVE, "kvsim._kvsim is not importable (pure-Python package only)")
@unittest.skipUnless(pandas is not None, "pandas does not import (Debian: python3-pandas)")
class FrameTest(unittest.TestCase):
    """With pandas, sweep, replay, analyze and plan return DataFrames: the CLI's CSV, column for
    column and row for row (plan: its JSON rows)."""

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(EXE):
            raise unittest.SkipTest(f"no kvsim program at {EXE} (set KVSIM_EXE)")
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = cls._tmp.name

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def assert_frame_is_csv(self, frame, path):
        rows = read_csv(path)
        self.assertIsInstance(frame, pandas.DataFrame)
        self.assertEqual(list(frame.columns), list(rows[0].keys()))
        self.assertEqual(list(frame.columns), list(pandas.read_csv(path).columns))
        self.assertEqual(len(frame), len(rows))
        for i, row in enumerate(rows):
            for column, text in row.items():
                value = frame[column].iloc[i]
                if isinstance(value, str):
                    self.assertEqual(value, text, (i, column))
                else:
                    self.assertTrue(same_number(text, value), (i, column, text, value))

    def test_sweep_frame_is_the_csv(self):
        frame = kvsim.sweep(TRACE, "scissorhands,h2o,oracle", "10%,64", seqs=[1], layers=[0, 5],
                            params={"scissorhands.w": 50})
        cli("sweep", TRACE, "--policies", "scissorhands,h2o,oracle", "--budgets", "10%,64", "--seqs", "1",
            "--layers", "0,5", "--param", "scissorhands.w=50", "--csv", os.path.join(self.tmp, "sweep.csv"))
        self.assert_frame_is_csv(frame, os.path.join(self.tmp, "sweep.csv"))
        self.assertEqual(tuple(frame.columns), tuple(kvsim.SWEEP_COLUMNS))
        self.assertEqual(frame["retention_mean"].dtype, np.float64)
        self.assertEqual(frame["evictions"].dtype, np.int64)

    def test_paged_sweep_frame_is_the_csv(self):
        frame = kvsim.sweep(TRACE, "h2o,tova", "20%,64", seqs=[1], layers=[0, 5], page=16, page_score="max")
        cli("sweep", TRACE, "--policies", "h2o,tova", "--budgets", "20%,64", "--seqs", "1", "--layers", "0,5",
            "--page", "16", "--page-score", "max", "--csv", os.path.join(self.tmp, "paged.csv"))
        self.assert_frame_is_csv(frame, os.path.join(self.tmp, "paged.csv"))
        self.assertEqual(tuple(frame.columns), tuple(kvsim.SWEEP_COLUMNS) + ("page",))
        self.assertEqual(list(frame["page"]), [16] * 4)
        self.assertEqual(kvsim.replay(TRACE, "h2o", "20%", seqs=[1], page=16, as_frame=False)["page"], 16)
        with self.assertRaisesRegex(kvsim.InputError, "policy recent has no per-position scores; --page needs"):
            kvsim.sweep(TRACE, "recent", "20%", seqs=[1], page=16)

    def test_pooled_replay_reports_each_sequence_as_the_cli(self):
        r = kvsim.replay(TRACE, "h2o", 16, seqs=[0, 1, 2], layers=[0], pool=2, as_frame=False, records=False)
        cli("replay", TRACE, "--policy", "h2o", "--budget", "16", "--seqs", "0,1,2", "--layers", "0", "--pool", "2",
            "--json", os.path.join(self.tmp, "pool.json"))
        with open(os.path.join(self.tmp, "pool.json")) as f:
            cell = json.load(f)["cells"][0]
        per_sequence = r["per_sequence"]
        self.assertEqual(list(per_sequence["seq"]), [0, 1, 2])
        self.assertEqual(list(per_sequence["pool"]), [0, 0, 1])
        for i, sequence in enumerate(cell["sequences"]):
            self.assertEqual(per_sequence["retention_mean"][i], sequence["retention"]["mean"])
            self.assertEqual(per_sequence["occupancy_peak"][i], sequence["occupancy_peak"])
        self.assertGreater(max(per_sequence["occupancy_peak"]), 17)  # one sequence held more than B + 1
        if pandas is not None:
            frame = kvsim.replay(TRACE, "h2o", 16, seqs=[0, 1, 2], layers=[0], pool=2)
            self.assertEqual(list(frame.attrs["per_sequence"]["seq"]), [0, 1, 2])
        with self.assertRaisesRegex(kvsim.InputError, "policy recent has no per-position scores; --pool needs"):
            kvsim.sweep(TRACE, "recent", "20%", seqs=[1], pool=2)

    def test_replay_frame_is_the_csv(self):
        frame = kvsim.replay(TRACE, "scissorhands", "20%", seqs=[0, 3], layers="1,4", w=100)
        cli("replay", TRACE, "--policy", "scissorhands", "--budget", "20%", "--seqs", "0,3", "--layers", "1,4",
            "--param", "w=100", "--csv", os.path.join(self.tmp, "replay.csv"))
        self.assertEqual(tuple(frame.columns), tuple(kvsim.REPLAY_COLUMNS))
        self.assertEqual(list(frame["layer"]), [1, 4, "all"])
        frame = frame.astype({"layer": str})
        self.assert_frame_is_csv(frame, os.path.join(self.tmp, "replay.csv"))
        with self.assertRaisesRegex(kvsim.InputError, "as_frame=False"):
            kvsim.replay(TRACE, "h2o", "20%", records=True)

    def test_analyze_frame_is_the_csv(self):
        frame = kvsim.analyze(TRACE, seqs=[0, 5], layers=[1, 2], lags=[1, 16])
        cli("analyze", TRACE, "--seqs", "0,5", "--layers", "1,2", "--lags", "1,16", "--csv",
            os.path.join(self.tmp, "analyze.csv"))
        self.assertEqual(list(frame["layer"])[-3:], [1, 2, "all"])
        self.assertEqual(list(frame["head"])[-3:], ["mean", "mean", "mean"])
        self.assert_frame_is_csv(frame.astype({"layer": str, "head": str}), os.path.join(self.tmp, "analyze.csv"))

    def test_plan_frame_is_the_json_rows(self):
        sweep = kvsim.sweep(TRACE, "h2o,oracle", "20%,60%", seqs=[0])
        frame = kvsim.plan("llama-3.1-8b", "h100-80gb", context=4096, sweep=sweep, target="retention>=0.9")
        document = kvsim.plan("llama-3.1-8b", "h100-80gb", context=4096, sweep=sweep.to_dict("list"),
                              target="retention>=0.9", as_frame=False)
        self.assertIsInstance(frame, pandas.DataFrame)
        self.assertEqual(list(frame.columns), list(document["rows"][0].keys()))
        self.assertEqual(frame.to_dict("records"), document["rows"])
        self.assertEqual(frame.attrs, {k: v for k, v in document.items() if k != "rows"})
        # The columns in the order of the table `kvsim plan` prints, each one's details after it,
        # as `kvsim plan --json` writes the rows.
        self.assertEqual(list(frame.columns)[:12],
                         ["policy", "bound", "budget", "budget_tokens_mean", "tokens_held_mean", "quant",
                          "quant_spec", "quant_measured", "bits_per_element", "retention_mean",
                          "kv_bytes_per_token", "residual_tokens"])
        table = ["policy", "budget", "quant", "retention_mean", "kv_bytes_per_token", "kv_bytes_per_sequence",
                 "blocks_per_sequence", "max_sequences", "gain", "step_seconds", "tokens_per_second_per_gpu"]
        self.assertEqual([c for c in frame.columns if c in table], table)
        cli("plan", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--budget", "20%,512", "--json",
            os.path.join(self.tmp, "plan.json"))
        with open(os.path.join(self.tmp, "plan.json"), encoding="utf-8") as f:
            written = json.load(f)["rows"]
        budgets = kvsim.plan("llama-3.1-8b", "h100-80gb", budget="20%,512")
        self.assertEqual(list(budgets.columns), list(written[0].keys()))
        self.assertEqual(budgets.to_dict("records"), written)
        # A DataFrame read back from the CLI's CSV plans as the sweep() result does.
        cli("sweep", TRACE, "--policies", "h2o,oracle", "--budgets", "20%,60%", "--seqs", "0", "--csv",
            os.path.join(self.tmp, "plan-sweep.csv"))
        from_csv = kvsim.plan("llama-3.1-8b", "h100-80gb", context=4096,
                              sweep=pandas.read_csv(os.path.join(self.tmp, "plan-sweep.csv")), target="retention>=0.9")
        self.assertEqual(list(from_csv["max_sequences"]), list(frame["max_sequences"]))

    def test_the_switch(self):
        self.assertIsInstance(kvsim.sweep(TRACE, "h2o", "20%", seqs=[0], layers=[0], as_frame=False), dict)
        try:
            kvsim.set_dataframes(False)
            self.assertIsInstance(kvsim.analyze(TRACE, seqs=[0], layers=[0]), dict)
            self.assertIsInstance(kvsim.analyze(TRACE, seqs=[0], layers=[0], as_frame=True), pandas.DataFrame)
        finally:
            kvsim.set_dataframes(None)
        self.assertIsInstance(kvsim.replay(TRACE, "h2o", "20%", seqs=[0], layers=[0]), pandas.DataFrame)

    def test_dicts_without_pandas(self):
        code = ("import sys; sys.modules['pandas'] = None\n"
                "import kvsim\n"
                "t = kvsim.bundled_trace()\n"
                "print(type(kvsim.sweep(t, 'h2o', '20%', seqs=[0], layers=[0])).__name__,\n"
                "      type(kvsim.replay(t, 'h2o', '20%', seqs=[0], layers=[0])).__name__)\n"
                "try:\n    kvsim.sweep(t, 'h2o', '20%', as_frame=True)\n"
                "except ImportError as e:\n    print(e)\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(),
                         ["dict dict", "kvsim: DataFrames need pandas (Debian: python3-pandas); as_frame=False "
                          "returns dicts"])


class WithoutNativeTest(unittest.TestCase):
    """Only the .py files (the dumper on a GPU machine): import kvsim works, replay says why not."""

    def test_pure_python_package(self):
        code = ("import kvsim, kvsim.tracefile\n"
                "try:\n    kvsim.replay\nexcept ImportError as e:\n    print('ImportError:', e)\n")
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ImportError: kvsim's replay functions need the compiled module kvsim._kvsim", r.stdout)
        self.assertIn("PYTHONPATH", r.stdout)


if __name__ == "__main__":
    unittest.main()
