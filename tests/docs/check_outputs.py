"""Every command the docs show with its output is run, and must print that output.

In README.md and docs/*.md, a fenced ```sh block holding one command (lines may continue
with a trailing backslash), followed by a paragraph with the word "prints" that ends in a
colon, and then a block indented by four spaces, is a claim: run from the repository root (build/kvsim meaning the
kvsim under test, KVSIM_EXE), the command prints every line of that block, in that order.
"""

import glob
import os
import re
import shlex
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXE = os.environ.get("KVSIM_EXE", os.path.join(ROOT, "build", "kvsim"))


def claims(path):
    """(line number, command, expected lines) for each command shown with its output."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```sh":
            i += 1
            continue
        start = i
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        i += 1
        j = i
        while j < len(lines) and lines[j].strip() == "":
            j += 1
        prose = []
        while j < len(lines) and lines[j].strip() and not lines[j].startswith("    "):
            prose.append(lines[j])
            j += 1
        logical = [line for line in body if line.strip() and not line.rstrip().endswith("\\")]
        if not prose or not re.search(r"\bprints\b", " ".join(prose)) or not prose[-1].rstrip().endswith(":") \
                or len(logical) != 1:
            continue
        while j < len(lines) and lines[j].strip() == "":
            j += 1
        expected = []
        while j < len(lines) and (lines[j].startswith("    ") or lines[j].strip() == ""):
            expected.append(lines[j][4:])
            j += 1
        while expected and not expected[-1].strip():
            expected.pop()
        if not expected:
            continue
        command = " ".join(line.rstrip("\\").strip() for line in body if line.strip())
        command = re.sub(r"\s+#.*$", "", command)
        out.append((start + 1, command, expected))
    return out


class DocsOutputs(unittest.TestCase):
    def test_every_shown_output(self):
        files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
        checked = 0
        for path in files:
            for line, command, expected in claims(path):
                where = f"{os.path.relpath(path, ROOT)}:{line}: {command}"
                args = shlex.split(command)
                self.assertEqual(args[0], "build/kvsim", where + " (only kvsim commands are checked)")
                result = subprocess.run([EXE] + args[1:], cwd=ROOT, capture_output=True, text=True)
                self.assertEqual(result.returncode, 0, where + "\n" + result.stderr)
                printed = result.stdout.split("\n")
                at = 0
                for want in expected:
                    if not want.strip():
                        continue
                    while at < len(printed) and printed[at].rstrip() != want.rstrip():
                        at += 1
                    self.assertLess(at, len(printed), f"{where}\nexpected the line\n{want}\nin\n{result.stdout}")
                    at += 1
                checked += 1
                print(f"ok {where}")
        self.assertGreater(checked, 0)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
