"""Two builds of one checkout at once (two `pip install .`) take turns: setup.py's build_lock
holds build-python/.lock for the whole run of setup.py, so the second waits (and says so) and
starts only once the first has finished, or died. Runs the lock itself in two processes on a
folder of its own, without pip (a pip install takes minutes)."""

import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# One "build": under setup.py's lock on FOLDER, write "start NAME", wait until the file RELEASE
# exists (or until killed), write "end NAME".
BUILD = r"""
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("kvsim_setup", os.path.join(sys.argv[1], "setup.py"))
setup = importlib.util.module_from_spec(spec)
spec.loader.exec_module(setup)  # not __main__: setup() does not run
folder, name, release, log = sys.argv[2:6]
with setup.build_lock(folder):
    with open(log, "a") as f:
        f.write(f"start {name}\n")
    while not os.path.exists(release):
        time.sleep(0.02)
    with open(log, "a") as f:
        f.write(f"end {name}\n")
"""


class BuildLockTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.folder = os.path.join(self._tmp.name, "build-python")
        self.log = os.path.join(self._tmp.name, "log")

    def tearDown(self):
        self._tmp.cleanup()

    def start(self, name, release):
        return subprocess.Popen([sys.executable, "-c", BUILD, ROOT, self.folder, name,
                                 os.path.join(self._tmp.name, release), self.log], stderr=subprocess.PIPE, text=True)

    def release(self, name):
        open(os.path.join(self._tmp.name, name), "w").close()

    def wait_for_start(self, name):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if os.path.exists(self.log) and f"start {name}" in self.lines():
                return
            time.sleep(0.02)
        self.fail(f"{name} never started")

    def lines(self):
        with open(self.log) as f:
            return f.read().splitlines()

    def test_the_second_build_waits_for_the_first(self):
        first = self.start("a", "release-a")
        self.wait_for_start("a")
        second = self.start("b", "release-b")
        self.release("release-b")  # b would finish at once, were it not for the lock
        waited = second.stderr.readline()
        self.assertEqual(waited, f"kvsim setup.py: waiting for another build of this checkout ({self.folder}/.lock)\n")
        time.sleep(0.5)
        self.assertEqual(self.lines(), ["start a"])  # b still waits
        self.release("release-a")
        _, first_said = first.communicate(timeout=60)
        second.communicate(timeout=60)
        self.assertEqual((first.returncode, second.returncode), (0, 0))
        self.assertEqual(self.lines(), ["start a", "end a", "start b", "end b"])
        self.assertEqual(first_said, "")

    def test_a_killed_build_leaves_no_lock(self):
        first = self.start("a", "never")
        self.wait_for_start("a")
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
        self.release("release-b")
        second = self.start("b", "release-b")
        _, said = second.communicate(timeout=60)
        self.assertEqual((second.returncode, said), (0, ""))
        self.assertEqual(self.lines(), ["start a", "start b", "end b"])

if __name__ == "__main__":
    unittest.main()
