"""kvsim.gui: kvsim-gui's window in the Python process, on the offscreen platform. The numpy H2O
of docs/extending.md (h2o-py), registered with kvsim.register_policy, is in the window's policy
list, selected, and what the window shows for it (the replay of the shown head's cache group,
the survival mask the heatmap draws) is the C++ h2o's bit for bit, on the bundled trace (6
heads) and a synthetic GQA trace (32 heads, 8 kv heads); a Python policy that raises is the
window's one-line message, not a crash; a bad option is kvsim.InputError; the docs' kvsim.gui
block prints what they show.
Needs the compiled module built with Qt (ctest python.gui sets PYTHONPATH); skipped without it
unless KVSIM_REQUIRE_NATIVE=1 and KVSIM_REQUIRE_GUI=1. Named to run after test_module in a
discovery (pip_install.py): the policies registered here stay in the process's list."""

import contextlib
import io
import os
import subprocess
import tempfile
import unittest

import numpy as np

import kvsim
from tests.python.test_python_policy import EXE, NATIVE, ROOT, TRACE, same

if NATIVE:
    from kvsim import _kvsim

GUI = NATIVE and hasattr(_kvsim, "_gui")  # built with Qt
if NATIVE and not GUI and os.environ.get("KVSIM_REQUIRE_NATIVE") == "1" and os.environ.get("KVSIM_REQUIRE_GUI") == "1":
    raise ImportError("kvsim._kvsim was built without Qt: kvsim.gui is required here")


def docs_blocks():
    """docs/extending.md's "A policy in Python": the H2O class up to its register_policy line,
    the kvsim.gui block, and the output shown after that."""
    with open(os.path.join(ROOT, "docs", "extending.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("\n## A policy in Python\n"):]
    section = section[:section.index("\n## ", 1)]
    blocks = section.split("```python\n")[1:]
    h2o = blocks[0].split("```\n", 1)[0]
    h2o = h2o[:h2o.index("\n", h2o.index("kvsim.register_policy(")) + 1]
    code, after = blocks[1].split("```\n", 1)
    shown = after.split("```\n", 1)[1].split("```\n", 1)[0].splitlines()
    return h2o, code, shown


def expected_mask(group, n):
    """Session::cachedAt from the engine's eviction steps: position p is held at step t when
    p <= t and it was never evicted or evicted at t or later."""
    evicted = np.asarray(group["eviction_step"], dtype=np.int64)
    t = np.arange(n)[:, None]
    p = np.arange(n)[None, :]
    return (p <= t) & ((evicted[None, :] < 0) | (evicted[None, :] >= t))


def group_of(groups, head):
    return next(g for g in groups if head in list(g["heads"]))


class Raises:
    """raises in observe at step 7"""

    def reset(self, ctx):
        pass

    def observe(self, step, cache, attention):
        if step == 7:
            return 1 / 0
        return None

    def evict(self, step, cache, excess, compress):
        return cache[:excess] if excess > 0 else None


@unittest.skipUnless(GUI, "kvsim._kvsim is not importable, or was built without Qt")
class GuiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        kvsim.set_dataframes(False)
        cls.h2o, cls.code, cls.shown = docs_blocks()
        cls.namespace = {"__name__": "docs_example"}
        exec(compile(cls.h2o, "extending.md", "exec"), cls.namespace)  # registers h2o-py
        kvsim.register_policy("raises-py", Raises)
        cls.tmp = tempfile.TemporaryDirectory()
        cls.gqa = os.path.join(cls.tmp.name, "gqa-32.h5")
        subprocess.run([EXE, "synth", cls.gqa, "--layers", "2", "--heads", "32", "--kv-heads", "8", "--head-dim", "64",
                        "--tokens", "512", "--seqs", "1"], check=True, stdout=subprocess.DEVNULL)

    @classmethod
    def tearDownClass(cls):
        kvsim.set_dataframes(None)
        cls.tmp.cleanup()

    def check_equals_cpp(self, path, layer, head, budget, **options):
        where = f"{os.path.basename(path)} layer {layer} head {head} B {budget} {options}"
        shown = kvsim.gui(path, policy="h2o-py", budget=budget, layer=layer, head=head, quit_after_ms=0, **options)
        cpp = kvsim.gui(path, policy="h2o", budget=budget, layer=layer, head=head, quit_after_ms=0, **options)
        self.assertIn("h2o-py", shown["policies"], where)
        self.assertEqual((shown["policy"], shown["label"], shown["error"]), ("h2o-py", "h2o-py", ""), where)
        self.assertEqual((shown["layer"], shown["head"]), (layer, head), where)
        # The window against itself with the C++ policy, every number of the shown replay.
        self.assertEqual(cpp["label"], "h2o", where)
        self.assertTrue(np.array_equal(shown["mask"], cpp["mask"]), where)
        self.assertEqual(len(shown["groups"]), len(cpp["groups"]), where)
        for a, b in zip(shown["groups"], cpp["groups"]):
            same(self, a, b, where)
        # ... and against the library's replay of the trace (kvsim replay's).
        engine = kvsim.replay(path, "h2o", budget, seqs=[0], layers=[layer], records=True, **options)
        mine, theirs = group_of(shown["groups"], head), group_of(engine["groups"].values(), head)
        for key in ("heads", "steps", "retention", "occupancy", "eviction_step", "evictions", "budget"):
            same(self, mine[key], theirs[key], f"{where} {key}")
        n = shown["n_tokens"]
        self.assertTrue(np.array_equal(shown["mask"], expected_mask(theirs, n)),
                        where)
        self.assertGreater(int(theirs["evictions"]), 0, where)
        return shown

    def test_bundled_trace_equals_cpp_h2o(self):
        shown = self.check_equals_cpp(TRACE, 3, 2, "20%")
        self.assertEqual(shown["budget"], 51)  # 20% of 256
        self.check_equals_cpp(TRACE, 0, 5, 32)
        self.check_equals_cpp(TRACE, 5, 0, "30%", mode="prefill")

    def test_32_head_gqa_trace_equals_cpp_h2o(self):
        self.check_equals_cpp(self.gqa, 1, 17, "20%")  # kv head 4: query heads 16..19

    def test_policy_exception_is_the_windows_message(self):
        shown = kvsim.gui(TRACE, policy="raises-py", budget=32, quit_after_ms=0)
        # The message names the replay that raised: the window also replays other budgets.
        problem = (r"Python policy raises-py, sequence 0, layer 0, kv head 0, step 7, budget \d+: "
                   r"observe raised ZeroDivisionError: division by zero")
        self.assertRegex(shown["error"], "^" + problem)
        self.assertRegex(shown["status"], "^Cannot replay: " + problem)
        self.assertEqual(shown["groups"], [])
        # The window still works afterwards, in the same process.
        self.assertEqual(kvsim.gui(TRACE, policy="h2o-py", quit_after_ms=0)["error"], "")

    def test_bad_options_raise_input_error(self):
        for options, message in ((dict(policy="nope"), "kvsim.gui: Bad policy: unknown policy 'nope'"),
                                 (dict(layer="x"), "kvsim.gui: --layer: 'x' is not an integer"),
                                 (dict(colour="red"), "kvsim.gui: Unknown option 'colour'."),
                                 (dict(layer=99), "kvsim.gui: Not in the trace: " + TRACE +
                                  ": layer 99 out of range (the trace has 6)"),
                                 (dict(head=-1), "kvsim.gui: Not in the trace: " + TRACE +
                                  ": head -1 out of range (the trace has 6)"),
                                 (dict(seq=8), "kvsim.gui: Not in the trace: " + TRACE +
                                  ": sequence 8 out of range (the trace has 8)"),
                                 (dict(step=256), "kvsim.gui: Not in the trace: " + TRACE +
                                  ": step 256 out of range (sequence 0 has 256)")):
            with self.assertRaises(kvsim.InputError) as caught:
                kvsim.gui(TRACE, quit_after_ms=0, **options)
            self.assertTrue(str(caught.exception).startswith(message), str(caught.exception))

    def test_screenshot(self):
        path = os.path.join(self.tmp.name, "shot.png")
        shown = kvsim.gui(kvsim.open(TRACE), policy="h2o-py", screenshot=path)
        self.assertEqual(shown["exit_code"], 0)
        with open(path, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        missing = os.path.join(self.tmp.name, "no", "such", "dir.png")
        with self.assertRaises(kvsim.InputError) as caught:
            kvsim.gui(TRACE, screenshot=missing)
        self.assertEqual(str(caught.exception),
                         "kvsim.gui: Cannot write the screenshot: " + missing + ": cannot write: directory does not exist")

    def test_docs_block_prints_what_is_shown(self):
        printed = io.StringIO()
        cwd = os.getcwd()
        os.chdir(self.tmp.name)  # the block writes its screenshot here
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(self.code, "extending.md", "exec"), dict(self.namespace))
        finally:
            os.chdir(cwd)
        self.assertEqual(printed.getvalue().splitlines(), self.shown)


if __name__ == "__main__":
    unittest.main()
