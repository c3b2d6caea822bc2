"""kvsim from Python given hostile input: every mistake is one kvsim.InputError line (the CLI's
words where the CLI has the same check), nothing is copied or allocated before its size is
checked, a policy's registration cannot change under a run using it, and Ctrl-C stops every
long call within about a second as KeyboardInterrupt.
Needs the build tree's package on PYTHONPATH (ctest python.hostile_module sets it, with
KVSIM_EXE naming the built kvsim); skipped where only the .py files are importable (unless
KVSIM_REQUIRE_NATIVE=1)."""

import os
import signal
import subprocess
import sys
import threading
import time
import unittest

import numpy as np

import kvsim

from tests.python.native import EXE, NATIVE, TRACE
INT_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def model_path():
    """stories15M where scripts/fetch-model.sh caches it, as kvsim looks for it."""
    folder = os.environ.get("KVSIM_MODEL_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "kvsim", "models")
    return os.path.join(folder, "stories15M.bin")


def causal_rows(heads, n, seed=0):
    """[heads, n, n] float32 softmax rows, zeros above the diagonal."""
    rng = np.random.default_rng(seed)
    logits = np.where(np.tril(np.ones((n, n), bool)), rng.normal(size=(heads, n, n)), -np.inf)
    return (np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)).astype(np.float32)


class EvictOldest:
    """evicts the oldest positions; the first reset waits until the test lets it go on"""

    started = threading.Event()
    go_on = threading.Event()

    def reset(self, ctx):
        if not EvictOldest.started.is_set():
            EvictOldest.started.set()
            EvictOldest.go_on.wait(60)

    def observe(self, step, cache, attention):
        pass

    def evict(self, step, cache, excess, compress):
        return cache[:excess] if excess > 0 else None


class EvictNewest:
    """evicts the newest positions before the current step"""

    def reset(self, ctx):
        pass

    def observe(self, step, cache, attention):
        pass

    def evict(self, step, cache, excess, compress):
        return cache[-1 - excess:-1] if excess > 0 else None


# A child Python for the Ctrl-C tests: {setup} at the top level, then {call} until it ends
# or is interrupted.
CHILD = """\
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # also where SIGINT came ignored
import numpy as np
import kvsim
kvsim.set_dataframes(False)
TRACE, MODEL = sys.argv[1], sys.argv[2]
{setup}
print("running", flush=True)
try:
    {call}
    print("finished", flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
"""

# A policy of 5 ms a step, for the child.
SLOW_POLICY = """\
class Slow:
    def reset(self, ctx):
        pass

    def observe(self, step, cache, attention):
        time.sleep(0.005)

    def evict(self, step, cache, excess, compress):
        return cache[:excess] if excess > 0 else None


kvsim.register_policy("slow", Slow)
"""


def raising(exception):
    """A class whose observe raises `exception` at step 5."""

    class Raising(EvictNewest):
        def observe(self, step, cache, attention):
            if step == 5:
                raise exception

    return Raising


@unittest.skipUnless(NATIVE, "kvsim._kvsim is not importable (pure-Python package only)")
class HostileModuleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        kvsim.set_dataframes(False)
        cls.trace = kvsim.open(TRACE)

    @classmethod
    def tearDownClass(cls):
        kvsim.set_dataframes(None)
        cls.trace.close()

    def assert_input_error(self, call, message):
        with self.assertRaises(kvsim.InputError) as caught:
            call()
        self.assertEqual(str(caught.exception), message)

    # ---- policies registered in Python ----

    def test_a_policy_cannot_be_registered_again_while_a_run_uses_it(self):
        options = dict(seqs=[0, 1], layers=[0, 1], threads=2)
        kvsim.register_policy("swapped", EvictOldest)
        EvictOldest.started.set()  # the run alone does not wait
        alone = kvsim.sweep(self.trace, "swapped", ["20%", "50%"], **options)
        EvictOldest.started.clear()
        EvictOldest.go_on.clear()
        outcome = {}

        def run():
            try:
                outcome["sweep"] = kvsim.sweep(self.trace, "swapped", ["20%", "50%"], **options)
            except BaseException as error:  # noqa: B902 - reported by the test below
                outcome["error"] = error

        thread = threading.Thread(target=run)
        thread.start()
        try:
            self.assertTrue(EvictOldest.started.wait(60), "the sweep did not start")
            self.assert_input_error(
                lambda: kvsim.register_policy("swapped", EvictNewest),
                "register_policy: policy 'swapped' is in use by a run that has not finished; register the new "
                "class under another name, or once the run is over")
        finally:
            EvictOldest.go_on.set()
            thread.join()
        self.assertNotIn("error", outcome)
        for column, values in alone.items():
            self.assertTrue(np.array_equal(np.asarray(values), np.asarray(outcome["sweep"][column])), column)
        kvsim.register_policy("swapped", EvictNewest)  # the run is over
        self.assertNotEqual(list(kvsim.sweep(self.trace, "swapped", "20%", **options)["retention_mean"]),
                            list(alone["retention_mean"][:1]))

    def test_keyboard_interrupt_and_system_exit_leave_a_policy_unchanged(self):
        for raised, kind in ((KeyboardInterrupt, KeyboardInterrupt), (SystemExit(3), SystemExit)):
            kvsim.register_policy("leaving", raising(raised))
            for threads in (1, 3):
                with self.assertRaises(kind):
                    kvsim.replay(self.trace, "leaving", 6, seqs=[1, 2], layers=[3], threads=threads)
            with self.assertRaises(kind):
                kvsim.replay_rows(causal_rows(2, 12), "leaving", 4)

    # ---- repeated items, paths, integers ----

    def test_a_repeated_policy_or_budget_is_refused_as_the_cli_refuses_it(self):
        for flag, value, call in (
                ("--policies", "h2o,h2o", lambda: kvsim.sweep(self.trace, ["h2o", "h2o"], ["20%"])),
                ("--budgets", "20%,20%", lambda: kvsim.sweep(self.trace, "h2o", ["20%", "20%"]))):
            r = subprocess.run([EXE, "sweep", TRACE, flag, value], capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 2, r.stderr)
            line = r.stderr.strip()
            self.assertEqual(line, f"kvsim sweep: {flag}: '{value.split(',')[0]}' is given twice in '{value}'")
            self.assert_input_error(call, line[len("kvsim sweep: "):])
        self.assert_input_error(lambda: kvsim.eval(self.trace, model_path(), "h2o,tova,h2o", "20%"),
                                "--policies: 'h2o' is given twice in 'h2o,tova,h2o'")
        self.assert_input_error(lambda: kvsim.eval(self.trace, model_path(), "h2o", [64, "20%", 64]),
                                "--budgets: '64' is given twice in '64,20%,64'")

    def test_a_path_with_a_nul_character_is_refused(self):
        bad = TRACE + "\0junk"
        cards = kvsim.data_dir() + "\0junk"
        cases = [
            (lambda: kvsim.open(bad), f"trace: {bad!r} contains a NUL character"),
            (lambda: kvsim.Trace(bad), f"trace: {bad!r} contains a NUL character"),
            (lambda: kvsim.sweep(bad, "h2o", "20%"), f"trace: {bad!r} contains a NUL character"),
            (lambda: kvsim.open(bad.encode()), f"trace: {bad.encode()!r} contains a NUL character"),
            (lambda: kvsim.eval(self.trace, "m.bin\0x", "h2o", "20%"), "model: 'm.bin\\x00x' contains a NUL character"),
            (lambda: kvsim.plan("llama-3.1-8b", "h100-80gb", cards=cards),
             f"--cards: {cards!r} contains a NUL character"),
            (lambda: kvsim.plan("llama-3.1-8b\0x", "h100-80gb"), "--model: 'llama-3.1-8b\\x00x' contains a NUL character"),
            (lambda: kvsim.plan_text("llama-3.1-8b", "h100-80gb\0x"), "--gpu: 'h100-80gb\\x00x' contains a NUL character"),
            (lambda: kvsim.plan("llama-3.1-8b", "h100-80gb", context="c.csv\0x"),
             "--context: 'c.csv\\x00x' contains a NUL character"),
            (lambda: kvsim.plan("llama-3.1-8b", "h100-80gb", sweep="s.csv\0x"),
             "--sweep: 's.csv\\x00x' contains a NUL character"),
            (lambda: kvsim.gui(bad), f"trace: {bad!r} contains a NUL character"),
            (lambda: kvsim.gui(screenshot="a.png\0x"), "--screenshot: 'a.png\\x00x' contains a NUL character"),
        ]
        for call, message in cases:
            self.assert_input_error(call, message)

    def test_integers_beyond_the_native_range_are_input_errors(self):
        rows = causal_rows(2, 8)
        model = model_path()
        cases = [
            (lambda: kvsim.replay(self.trace, "h2o", "20%", seqs=[2**40]), "--seqs", 2**40, 0, INT_MAX),
            (lambda: kvsim.replay(self.trace, "h2o", "20%", layers=-1), "--layers", -1, 0, INT_MAX),
            (lambda: kvsim.replay(self.trace, "h2o", "20%", page=2**70), "--page", 2**70, 0, INT64_MAX),
            (lambda: kvsim.sweep(self.trace, "h2o", "20%", threads=2**40), "--threads", 2**40, 0, INT_MAX),
            (lambda: kvsim.replay_rows(rows, "h2o", 2, n_kv_heads=2**32), "n_kv_heads", 2**32, 1, INT_MAX),
            (lambda: kvsim.replay_rows(rows, "h2o", 2, origin=(2**40, 0, 0)), "origin", 2**40, 0, INT_MAX),
            (lambda: kvsim.replay_rows(rows, "h2o", 2, origin=(0, 0, -2**40)), "origin", -2**40, 0, INT_MAX),
            (lambda: kvsim.replay_rows(rows, "h2o", 2, mode="prefill", prompt_len=2**70), "--prompt-len", 2**70, 0,
             INT64_MAX),
            (lambda: kvsim.replay_rows(rows, "h2o", 2, compress_every=-2**70), "--compress-every", -2**70, 0,
             INT64_MAX),
            (lambda: kvsim.eval(self.trace, model, "h2o", "20%", seqs=[2**40]), "--seqs", 2**40, 0, INT_MAX),
            (lambda: kvsim.eval(self.trace, model, "h2o", "20%", tokens=2**40), "--tokens", 2**40, 0, INT_MAX),
            (lambda: kvsim.eval(self.trace, model, "h2o", "20%", threads=2**40), "--threads", 2**40, 0, INT_MAX),
            (lambda: kvsim.eval(self.trace, model, "h2o", "20%", prompt_len=2**64), "--prompt-len", 2**64, 0,
             INT64_MAX),
            (lambda: kvsim.eval(self.trace, model, "h2o", "20%", recall_distance=0), "--recall-distance", 0, 1,
             INT64_MAX),
            (lambda: kvsim.analyze(self.trace, lags=[2**70]), "--lags", 2**70, 1, 2**30),
            (lambda: kvsim.analyze(self.trace, samples=2**40), "--samples", 2**40, 0, 64),
            (lambda: kvsim.analyze(self.trace, max_steps=2**64), "--max-steps", 2**64, 1, INT64_MAX),
            (lambda: kvsim.analyze_rows(rows, min_positions=2**64), "--min-positions", 2**64, 2, INT64_MAX),
            (lambda: kvsim.plan("llama-3.1-8b", "h100-80gb", gpus=2**40), "--gpus", 2**40, 1, INT_MAX),
            (lambda: kvsim.plan("llama-3.1-8b", "h100-80gb", block_size=2**40), "--block-size", 2**40, 1, INT_MAX),
            (lambda: self.trace.attention(2**40, 0, 0), "seq", 2**40, 0, INT_MAX),
            (lambda: self.trace.attention(0, 0, [0, 2**40]), "head", 2**40, 0, INT_MAX),
            (lambda: self.trace.tensor(0, 2**40, "k", 0), "layer", 2**40, 0, INT_MAX),
            (lambda: self.trace.sequence(2**40), "seq", 2**40, 0, INT_MAX),
            (lambda: self.trace.tokens(-2**40), "seq", -2**40, 0, INT_MAX),
            (lambda: self.trace.token_text(2**40), "seq", 2**40, 0, INT_MAX),
        ]
        for call, name, value, low, high in cases:
            self.assert_input_error(call, f"{name}: {value} is out of range ({low} to {high})")

    # ---- arrays ----

    def test_array_shapes_are_checked_before_anything_is_copied(self):
        """Broadcast views ask for no memory; expanded they would need up to 90 GB."""
        one = np.float32(1)
        rows = causal_rows(2, 5)
        cases = [
            (lambda: kvsim.replay_rows(np.broadcast_to(one, (1, 150000, 150000)), "h2o", 2),
             "attention: 150000 rows is more than the 131072 supported"),
            (lambda: kvsim.analyze_rows(np.broadcast_to(one, (2, 150000, 150000))),
             "attention: 150000 rows is more than the 131072 supported"),
            (lambda: kvsim.replay_rows(np.broadcast_to(one, (150000 * 150001 // 2,)), "h2o", 2),
             "attention: 150000 rows is more than the 131072 supported"),
            (lambda: kvsim.replay_rows(np.broadcast_to(one, (2**32 + 1, 3)), "h2o", 2),
             "attention: 4294967297 heads (1 to 1024 supported)"),
            (lambda: kvsim.replay_rows(np.broadcast_to(rows[:1], (4, 5, 5)), "h2o", 2),
             "attention: a broadcast view (elements sharing memory) is not expanded; pass "
             "np.ascontiguousarray(attention)"),
            (lambda: kvsim.replay_rows(rows, "h2o", 2, values=np.broadcast_to(one, (2, 5, 2**40))),
             "values: head_dim 1099511627776 is more than the 4096 supported"),
            (lambda: kvsim.replay_rows(rows, "h2o", 2, values=np.broadcast_to(one, (2, 5, 64))),
             "values: a broadcast view (elements sharing memory) is not expanded; pass np.ascontiguousarray(values)"),
        ]
        for call, message in cases:
            self.assert_input_error(call, message)
        # The same rows, given as real arrays, are replayed.
        expanded = np.ascontiguousarray(np.broadcast_to(rows[:1], (4, 5, 5)))
        self.assertEqual(kvsim.replay_rows(expanded, "h2o", 2)["retention"].shape, (4, 5))
        strided = np.asfortranarray(rows.astype(np.float64))  # copied, as any non-float32 array
        self.assertEqual(kvsim.replay_rows(strided, "h2o", 2)["retention"].shape, (2, 5))

    # ---- Ctrl-C ----

    def interrupt(self, setup, call, budget_s=3.0):
        """Runs `call` in a child Python after `setup` (CHILD), sends it SIGINT once it is
        running, and checks that the call ends within `budget_s` by KeyboardInterrupt."""
        script = CHILD.format(setup=setup, call=call)
        child = subprocess.Popen([sys.executable, "-c", script, TRACE, model_path()], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            self.assertEqual(child.stdout.readline(), "running\n", child.stderr.read() if child.poll() else "")
            time.sleep(1.0)
            self.assertIsNone(child.poll(), "the call ended before Ctrl-C")
            child.send_signal(signal.SIGINT)
            sent = time.monotonic()
            out, err = child.communicate(timeout=120)
            took = time.monotonic() - sent
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
        self.assertEqual(out, "KeyboardInterrupt\n", err)
        self.assertEqual(child.returncode, 0, err)
        self.assertLess(took, budget_s, f"{call}: {took:.1f} s after Ctrl-C")

    def test_ctrl_c_stops_replay_rows_with_a_python_policy(self):
        self.interrupt(SLOW_POLICY + "rows = kvsim.open(TRACE).attention(0, 0)\n",
                       'kvsim.replay_rows(rows, "slow", 16)')

    def test_ctrl_c_stops_a_replay_within_a_work_item(self):
        """One (sequence, layer) of the slow policy takes 6 x 256 x 5 ms: longer than Ctrl-C may."""
        self.interrupt(SLOW_POLICY, 'kvsim.replay(TRACE, "slow", 16, threads=1)')

    @unittest.skipUnless(os.path.exists(model_path()), "no stories15M (scripts/fetch-model.sh)")
    def test_ctrl_c_stops_the_closed_loop(self):
        self.interrupt("", 'kvsim.eval(TRACE, MODEL, "h2o,tova", "20%,50%", seqs=[0, 1, 2], threads=1)')

    @unittest.skipUnless(os.path.exists(model_path()), "no stories15M (scripts/fetch-model.sh)")
    def test_ctrl_c_stops_the_closed_loop_of_a_python_policy(self):
        self.interrupt(SLOW_POLICY, 'kvsim.eval(TRACE, MODEL, "slow", "20%", seqs=[0, 1], threads=2)')


if __name__ == "__main__":
    unittest.main()
