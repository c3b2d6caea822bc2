"""Policies written in Python (kvsim.register_policy): the numpy H2O of docs/extending.md
equals the C++ h2o bit for bit on the bundled trace, every number replay, sweep and the closed
loop (kvsim.eval, itself the CLI's) report, at one thread and four, and prints what the docs
show; a numpy knorm reading the keys equals the C++ knorm, a numpy TOVA (one cache per layer)
tova; the tensors a class declares are the stored ones; exceptions and bad answers from evict
raise kvsim.PolicyError, one line naming the policy, sequence, layer, kv head, step and budget.
Needs the compiled module (ctest python.policies sets PYTHONPATH); skipped without it unless
KVSIM_REQUIRE_NATIVE=1."""

import contextlib
import io
import json
import math
import os
import subprocess
import tempfile
import unittest

import numpy as np

import kvsim

from tests.python.native import EXE, NATIVE, ROOT, TRACE


def model_path():
    """stories15M where scripts/fetch-model.sh caches it, as kvsim looks for it."""
    folder = os.environ.get("KVSIM_MODEL_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "kvsim", "models")
    return os.path.join(folder, "stories15M.bin")


def docs_example():
    """docs/extending.md's "A policy in Python": its python block and the output shown after it."""
    with open(os.path.join(ROOT, "docs", "extending.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("\n## A policy in Python\n"):]
    section = section[:section.index("\n## ", 1)]
    code, after = section.split("```python\n", 1)[1].split("```\n", 1)
    shown = after.split("```\n", 1)[1].split("```\n", 1)[0].splitlines()
    return code, shown


def same(test, a, b, where):
    """Equal bit for bit: numbers (NaN equal to NaN), strings, arrays of them, dicts of them."""
    if isinstance(a, dict):
        test.assertEqual(sorted(a, key=str), sorted(b, key=str), where)
        for key in a:
            same(test, a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        test.assertEqual(len(a), len(b), where)
        for i, (x, y) in enumerate(zip(a, b)):
            same(test, x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        test.assertEqual((a.dtype, a.shape), (b.dtype, b.shape), where)
        if a.dtype.kind == "f":
            test.assertTrue(np.array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}")), where)
        else:
            np.testing.assert_array_equal(a, b, where)
    elif isinstance(a, float) and math.isnan(a):
        test.assertTrue(isinstance(b, float) and math.isnan(b), where)
    else:
        test.assertEqual(a, b, where)


class Knorm:
    """knorm in numpy: minus the L2 norm of the stored key, the new one a candidate"""

    needs_attention = False
    needs_keys = True

    def reset(self, ctx):
        self.minus_norm = np.zeros(ctx.n_tokens)

    def observe(self, step, cache, attention, keys):
        squares = 0.0
        for x in keys[0, -1].astype(np.float64):  # in order, as the C++ loop sums
            squares += x * x
        self.minus_norm[step] = -math.sqrt(squares)

    def evict(self, step, cache, excess, compress):
        if excess > 0:
            return cache[np.argsort(self.minus_norm[cache], kind="stable")[:excess]]


class Tova:
    """TOVA in numpy: per layer, evict the lowest current-step attention"""

    grouping = "layer"

    def reset(self, ctx):
        assert ctx.n_heads == 6  # the layer's heads share the cache

    def observe(self, step, cache, attention):
        self.current = attention

    def evict(self, step, cache, excess, compress):
        return cache[np.argsort(self.current, kind="stable")[:max(excess, 0)]]


class Recorder:
    """keeps what it is given (a test: instances share the class's list, one thread)"""

    needs_keys = needs_values = needs_queries = True
    seen = []

    def reset(self, ctx):
        self.ctx, self.steps = ctx, []
        Recorder.seen.append(self)

    def observe(self, step, cache, attention, keys, values, queries):
        self.steps.append((step, cache, attention, keys, values, queries))

    def evict(self, step, cache, excess, compress):
        return cache[:max(excess, 0)].tolist()  # plain ints in a list


class Sticky:
    """keeps the newest `keep` positions beyond the budget's share; parameters reach __init__"""

    params = [{"name": "keep", "type": "integer", "default": 2, "min": 0, "max": 100, "help": "spare"},
              {"name": "note", "type": "choice", "default": "a", "choices": ["a", "b"]}]
    made = []

    def __init__(self, keep, note):
        Sticky.made.append((keep, note))

    def reset(self, ctx):
        pass

    def observe(self, step, cache, attention):
        pass

    def evict(self, step, cache, excess, compress):
        return cache[:excess] if excess > 0 else []


def failing(fail_at, answer):
    """A class whose evict answers `answer(cache, excess)` once step `fail_at` is reached."""

    class Failing:
        def reset(self, ctx):
            pass

        def observe(self, step, cache, attention):
            if step == fail_at and answer is None:
                1 / 0

        def evict(self, step, cache, excess, compress):
            if step >= fail_at and answer is not None:
                return answer(cache, excess)
            return cache[:excess] if excess > 0 else None

    return Failing


@unittest.skipUnless(NATIVE, "kvsim._kvsim is not importable (pure-Python package only)")
class PythonPolicyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        kvsim.set_dataframes(False)
        cls.code, cls.shown = docs_example()
        cls.printed = io.StringIO()
        cls.namespace = {"__name__": "docs_example"}
        with contextlib.redirect_stdout(cls.printed):
            exec(compile(cls.code, "extending.md", "exec"), cls.namespace)  # registers h2o-py
        cls.trace = kvsim.open(TRACE)

    @classmethod
    def tearDownClass(cls):
        kvsim.set_dataframes(None)
        cls.trace.close()

    def test_docs_example_prints_what_is_shown(self):
        self.assertEqual(self.printed.getvalue().splitlines(), self.shown)
        listed = {p["name"]: p for p in kvsim.policies()}
        self.assertTrue(listed["h2o-py"]["python"])
        self.assertFalse(listed["h2o"]["python"])
        self.assertEqual(listed["h2o-py"]["summary"], "H2O in numpy: accumulated attention, floor(B/2) recent kept")

    def test_replay_equals_cpp_h2o(self):
        """Every number of the dict, the per-step records included, over the whole trace."""
        for options in ({"budget": "20%", "threads": 1}, {"budget": 24, "threads": 4, "mode": "prefill",
                                                          "seqs": [0, 5]}):
            budget = options.pop("budget")
            want = kvsim.replay(self.trace, "h2o", budget, records=True, **options)
            got = kvsim.replay(self.trace, "h2o-py", budget, records=True, **options)
            self.assertEqual((got["policy"], got["label"]), ("h2o-py", "h2o-py"))
            for key in ("policy", "label"):
                got.pop(key), want.pop(key)
            self.assertGreater(got["evictions"], 0)
            same(self, want, got, f"replay {budget} {options}")

    def test_sweep_equals_cpp_h2o(self):
        """Every column of every row, at budgets shared by the C++ (adopt) and run apart here."""
        budgets = ["5%", "25%", "64", "90%"]
        s = kvsim.sweep(self.trace, ["h2o", "h2o-py"], budgets, threads=4)
        n = len(budgets)
        self.assertEqual(s["policy"], ["h2o"] * n + ["h2o-py"] * n)
        for column in s:
            if column in ("policy", "label"):
                continue
            a, b = s[column][:n], s[column][n:]
            if isinstance(a, list):
                self.assertEqual(a, b, column)
            else:
                same(self, np.asarray(a), np.asarray(b), column)

    @unittest.skipUnless(os.path.exists(model_path()), "no stories15M (scripts/fetch-model.sh)")
    def test_closed_loop_equals_cpp_h2o_and_the_cli(self):
        """kvsim.eval: the closed loop with the Python H2O is the C++ one's, every number; the
        module's document for h2o is the CLI's `kvsim eval --json`."""
        args = dict(seqs=[0, 4], tokens=96, threads=2)
        e = kvsim.eval(TRACE, model_path(), ["h2o", "h2o-py"], ["30%", 20], **args)
        self.assertEqual([c["label"] for c in e["cells"]], ["h2o", "h2o", "h2o-py", "h2o-py"])
        for want, got in zip(e["cells"][:2], e["cells"][2:]):
            for key in ("policy", "label"):
                got.pop(key), want.pop(key)
            self.assertGreater(got["closed_loop"]["evictions"], 0)
            same(self, want, got, f"eval {want['budget']}")
        if not os.path.exists(EXE):
            self.skipTest(f"no kvsim program at {EXE} (set KVSIM_EXE)")
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "eval.json")
            subprocess.run([EXE, "eval", model_path(), "--trace", TRACE, "--policies", "h2o", "--budgets", "30%,20",
                            "--seqs", "0,4", "--tokens", "96", "--threads", "2", "--json", out],
                           check=True, capture_output=True, timeout=300)
            with open(out, encoding="utf-8") as f:
                cli = json.load(f)
        module = kvsim.eval(TRACE, model_path(), "h2o", "30%,20", **args)
        for doc in (cli, module):
            doc.pop("elapsed_seconds", None)
        self.assertEqual(module, cli)
        with self.assertRaisesRegex(kvsim.InputError, "--seqs: sequence 9 out of range"):
            kvsim.eval(TRACE, model_path(), "h2o-py", "30%", seqs=[9])

    @unittest.skipUnless(os.path.exists(model_path()), "no stories15M (scripts/fetch-model.sh)")
    def test_proxy_table(self):
        """kvsim.proxy_table: eval()'s proxy_table, one row per (group, measure) in the library's
        order, NaN where the document says null (n/a)."""
        e = kvsim.eval(TRACE, model_path(), "h2o,tova,recent", "20%,50%", seqs=[0], tokens=64)
        doc = e["proxy_table"]
        self.assertEqual(tuple(doc["measures"]), kvsim.PROXY_MEASURES)
        self.assertEqual(tuple(doc["targets"]), kvsim.PROXY_TARGETS)
        self.assertEqual(kvsim.PROXY_MEASURES[0], "retention_mean")
        self.assertEqual(kvsim.PROXY_TARGETS[0], "perplexity_increase")
        table = kvsim.proxy_table(e, as_frame=False)
        rows = len(kvsim.PROXY_MEASURES)  # per group
        self.assertEqual(table["over"][::rows], ["all (policy, budget) pairs", "policies at budget 20%",
                                                 "policies at budget 50%"])
        self.assertEqual(table["points"][::rows], [6, 3, 3])
        self.assertEqual(table["measure"][:rows], list(kvsim.PROXY_MEASURES))
        row = 0
        for group in doc["groups"]:
            for measure in kvsim.PROXY_MEASURES:
                for target in kvsim.PROXY_TARGETS:
                    want = group["spearman"][measure][target]
                    got = table[target][row]
                    self.assertTrue(math.isnan(got) if want is None else got == want, (measure, target))
                row += 1
        self.assertEqual(e["correlations"][0]["spearman_retention_vs_perplexity_increase"],
                         table["perplexity_increase"][0])

    @unittest.skipUnless(os.path.exists(model_path()), "no stories15M (scripts/fetch-model.sh)")
    def test_closed_loop_layer_budgets_and_question_equal_the_cli(self):
        """kvsim.eval's layer_budget, question, prompt_len and recall_distance are kvsim eval's
        --layer-budget, --question, --prompt-len and --recall-distance: the same document."""
        if not os.path.exists(EXE):
            self.skipTest(f"no kvsim program at {EXE} (set KVSIM_EXE)")
        for policies, kwargs, flags in (("snapkv", {"layer_budget": "pyramid"}, ["--layer-budget", "pyramid"]),
                                        ("snapkv,pyramidkv", {"question": 8, "prompt_len": 40},
                                         ["--question", "8", "--prompt-len", "40"]),
                                        ("h2o", {"recall_distance": 8}, ["--recall-distance", "8"])):
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "eval.json")
                subprocess.run([EXE, "eval", model_path(), "--trace", TRACE, "--policies", policies, "--budgets",
                                "50%,16", "--seqs", "1", "--tokens", "96", "--json", out] + flags,
                               check=True, capture_output=True, timeout=300)
                with open(out, encoding="utf-8") as f:
                    cli = json.load(f)
            module = kvsim.eval(TRACE, model_path(), policies, "50%,16", seqs=[1], tokens=96, **kwargs)
            for doc in (cli, module):
                doc.pop("elapsed_seconds", None)
            self.assertEqual(module, cli, kwargs)
            self.assertEqual(module["recall_distance"], kwargs.get("recall_distance", 32))
            self.assertIn("recall_perplexity", module["cells"][0]["closed_loop"])
        with self.assertRaisesRegex(kvsim.InputError, "not shorter than the prompt"):
            kvsim.eval(TRACE, model_path(), "snapkv", "16", seqs=[1], tokens=96, question=17)

    def test_replay_rows(self):
        rng = np.random.default_rng(1)
        n = 40
        logits = np.where(np.tril(np.ones((n, n), bool)), rng.normal(size=(2, n, n)), -np.inf)
        attn = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
        want = kvsim.replay_rows(attn, "h2o", 10)
        got = kvsim.replay_rows(attn, "h2o-py", 10)
        for key in ("policy", "label"):
            got.pop(key), want.pop(key)
        same(self, want, got, "replay_rows")

    def test_adaptive_heads_refuse_a_policy_without_scores(self):
        # A Python policy names its victims and gives no scores to share a layer's slots by.
        with self.assertRaisesRegex(kvsim.InputError, "^policy h2o-py has no per-position scores; --head-budget "
                                                      "adaptive needs a scoring policy$"):
            kvsim.replay(self.trace, "h2o-py", 16, seqs=[0], layers=[0], head_budget="adaptive")

    def test_knorm_reads_the_keys(self):
        kvsim.register_policy("knorm-py", Knorm)
        for budget in ("30%", 16):
            want = kvsim.replay(self.trace, "knorm", budget, seqs=[0, 6], layers=[0, 3], records=True, threads=2)
            got = kvsim.replay(self.trace, "knorm-py", budget, seqs=[0, 6], layers=[0, 3], records=True, threads=2)
            for key in ("policy", "label"):
                got.pop(key), want.pop(key)
            same(self, want, got, f"knorm {budget}")

    def test_layer_grouping_equals_cpp_tova(self):
        kvsim.register_policy("tova-py", Tova)
        for budget, mode in (("20%", "stream"), ("30%", "prefill")):
            want = kvsim.replay(self.trace, "tova", budget, seqs=[0, 3], layers=[1, 4], mode=mode, records=True)
            got = kvsim.replay(self.trace, "tova-py", budget, seqs=[0, 3], layers=[1, 4], mode=mode, records=True)
            for key in ("policy", "label"):
                got.pop(key), want.pop(key)
            self.assertEqual(sorted(got["groups"]), [(s, l, 0) for s in (0, 3) for l in (1, 4)])
            same(self, want, got, f"tova {budget} {mode}")

    def test_tensors_are_the_stored_ones(self):
        Recorder.seen.clear()
        kvsim.register_policy("recorder", Recorder)
        kvsim.replay(self.trace, "recorder", 8, seqs=[2], layers=[1], threads=1)
        self.assertEqual(len(Recorder.seen), 6)  # one instance per kv head
        q, k, v = ([self.trace.tensor(2, 1, name, h) for h in range(6)] for name in "qkv")
        heads = set()
        for policy in Recorder.seen:
            ctx = policy.ctx
            self.assertEqual((ctx.n_tokens, ctx.budget, ctx.n_heads, ctx.layer), (256, 8, 1, 1))
            step, cache, attention, keys, values, queries = policy.steps[0]
            head = next(h for h in range(6) if np.array_equal(k[h][0], keys[0, 0]))
            heads.add(head)
            for step, cache, attention, keys, values, queries in policy.steps:
                self.assertEqual(cache.dtype, np.int32)
                self.assertEqual(cache[-1], step)
                self.assertEqual(attention.shape, cache.shape)
                self.assertAlmostEqual(float(attention.sum(dtype=np.float64)), 1.0, places=5)
                np.testing.assert_array_equal(keys, k[head][cache][None])
                np.testing.assert_array_equal(values, v[head][cache][None])
                np.testing.assert_array_equal(queries, q[head][step][None])
            self.assertEqual(len(policy.steps), 256)
            self.assertLessEqual(max(len(s[1]) for s in policy.steps), 9)
        self.assertEqual(heads, set(range(6)))

    def test_parameters(self):
        Sticky.made.clear()
        kvsim.register_policy("sticky", Sticky)
        r = kvsim.replay(self.trace, "sticky", 16, seqs=[0], layers=[0], keep=5, threads=1)
        self.assertEqual((r["label"], r["params"]), ("sticky(keep=5)", "keep=5"))
        self.assertEqual(set(Sticky.made), {(5, "a")})
        spec = next(p for p in kvsim.policies() if p["name"] == "sticky")["params"]
        self.assertEqual([(p["name"], p["type"], p["default"]) for p in spec],
                         [("keep", "integer", "2"), ("note", "choice", "a")])
        with self.assertRaisesRegex(kvsim.InputError, "sticky.*keep"):
            kvsim.replay(self.trace, "sticky", 16, seqs=[0], layers=[0], keep=500)
        with self.assertRaisesRegex(kvsim.InputError, "sticky has no parameter 'w'"):
            kvsim.replay(self.trace, "sticky", 16, seqs=[0], layers=[0], w=1)

    def test_errors_are_one_line(self):
        at = r"Python policy bad, sequence 1, layer 3, kv head 0, step 7, budget 6: "
        cases = [
            (None, at + r"observe raised ZeroDivisionError: division by zero \(at test_python_policy.py:\d+\)$"),
            (lambda cache, excess: [cache[0], cache[0]], at + r"evict returned position \d+ twice$"),
            (lambda cache, excess: [1000], at + "evict returned position 1000, which is not cached$"),
            (lambda cache, excess: [-1], at + "evict returned position -1, which is not cached$"),
            (lambda cache, excess: [], at + r"evict returned 0 positions, needs at least 1 \(the cache is over"),
            (lambda cache, excess: [0.0], at + "evict must return a list or 1-d array of integer positions, got "
                                               r"float64 of shape \(1,\)$"),
            (lambda cache, excess: [[0]], at + "evict must return .* shape \\(1, 1\\)$"),
            (lambda cache, excess: "x", at + "evict must return"),
            (lambda cache, excess: 1 / 0, at + "evict raised ZeroDivisionError"),
        ]
        for answer, message in cases:
            kvsim.register_policy("bad", failing(7, answer))  # replaces the previous one
            for threads in (1, 3):
                with self.assertRaisesRegex(kvsim.PolicyError, message):
                    kvsim.replay(self.trace, "bad", 6, seqs=[1], layers=[3], threads=threads)
        self.assertTrue(issubclass(kvsim.PolicyError, RuntimeError))

        class Broken(Knorm):
            def __init__(self):
                raise KeyError("k")

        kvsim.register_policy("broken", Broken)
        with self.assertRaisesRegex(kvsim.PolicyError, r"^Python policy broken: __init__ raised KeyError: 'k' \(at"):
            kvsim.replay(self.trace, "broken", 6, seqs=[1], layers=[3])
        Broken.__init__ = lambda self: None
        Broken.reset = lambda self, ctx: ctx.missing
        with self.assertRaisesRegex(kvsim.PolicyError, r"^Python policy broken, sequence 1, layer 3, kv head 0, budget 6: "
                                                       r"reset raised AttributeError: "
                                                       r"'types.SimpleNamespace' object has no attribute 'missing'"):
            kvsim.replay(self.trace, "broken", 6, seqs=[1], layers=[3])

    def test_errors_name_the_cache_group_and_budget(self):
        # A class that raises at step 9 only in the cache group whose seed is that of sequence
        # 2, layer 3, kv head 4 (cache_group_seed: seq << 40 ^ layer << 20 ^ group) at B = 51
        # (20% of 256): replay and sweep run many groups and budgets, and name that one.
        target = (2 << 40) ^ (3 << 20) ^ 4

        class OneGroup:
            def reset(self, ctx):
                self.armed = ctx.seed == target and ctx.budget == 51

            def observe(self, step, cache, attention):
                if self.armed and step == 9:
                    raise ValueError("only here")

            def evict(self, step, cache, excess, compress):
                return cache[:excess] if excess > 0 else None

        kvsim.register_policy("one-group", OneGroup)
        message = (r"^Python policy one-group, sequence 2, layer 3, kv head 4, step 9, budget 51: "
                   r"observe raised ValueError: only here \(at test_python_policy.py:\d+\)$")
        for threads in (1, 4):
            with self.assertRaisesRegex(kvsim.PolicyError, message):
                kvsim.replay(self.trace, "one-group", "20%", seqs=[0, 1, 2, 3], layers=[2, 3], threads=threads)
            with self.assertRaisesRegex(kvsim.PolicyError, message):
                kvsim.sweep(self.trace, "one-group", "6,20%,60%", seqs=[1, 2], layers=[3], threads=threads)
        # A class with one cache per layer names the layer's kv heads.
        kvsim.register_policy("layer-bad", type("LayerBad", (failing(7, None),), {"grouping": "layer"}))
        with self.assertRaisesRegex(kvsim.PolicyError, r"^Python policy layer-bad, sequence 1, layer 3, all kv heads, "
                                                       r"step 7, budget 6: observe raised ZeroDivisionError"):
            kvsim.sweep(self.trace, "layer-bad", "6", seqs=[1], layers=[3])

    def test_registration_is_checked(self):
        with self.assertRaisesRegex(kvsim.InputError, "policy 'h2o' is built in and cannot be replaced"):
            kvsim.register_policy("h2o", Knorm)
        for bad in ("a b", "my.h2o", ""):
            with self.assertRaisesRegex(kvsim.InputError, f"policy name '{bad}'"):
                kvsim.register_policy(bad, Knorm)
        with self.assertRaisesRegex(kvsim.InputError, "no method evict"):
            kvsim.register_policy("x", type("X", (), {"reset": print, "observe": print}))
        with self.assertRaisesRegex(kvsim.InputError, "grouping must be 'kv_head' or 'layer'"):
            kvsim.register_policy("x", type("X", (Knorm,), {"grouping": "head"}))
        with self.assertRaisesRegex(kvsim.InputError, "needs_keys must be True or False"):
            kvsim.register_policy("x", type("X", (Knorm,), {"needs_keys": 1}))
        with self.assertRaisesRegex(kvsim.InputError, "parameter keep"):
            kvsim.register_policy("x", type("X", (Sticky,), {"params": [{"name": "keep", "default": -1}]}))
        with self.assertRaisesRegex(kvsim.InputError, "^register_policy: x: parameter 'keep' is declared twice$"):
            kvsim.register_policy("x", type("X", (Sticky,), {"params": Sticky.params + [{"name": "keep"}]}))
        self.assertNotIn("x", [p["name"] for p in kvsim.policies()])


if __name__ == "__main__":
    unittest.main()
