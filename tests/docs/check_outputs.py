"""Every command the docs show with its output is run, and must print that output.

In README.md and docs/*.md a claim is a fenced ```sh block of kvsim commands (a line may go
on after a trailing backslash; `#` starts a comment) followed by its output, either
- a plain ``` block right after it, or
- a paragraph with the word "prints" ending in a colon, then a block indented by 4 spaces.
The commands run in order from the repository root (build/kvsim meaning the kvsim under
test, KVSIM_EXE; out/ is created). The output shown is
- after a paragraph ending in "prints:", the whole output: the lines printed that are not
  blank must be the lines shown that are not blank, all of them, in order;
- else an excerpt (a plain block; "prints (excerpt):", "prints, among other lines:",
  "prints (after the generated text):"; or a block with a line starting with "...", an
  elision, skipped): every line shown, in order, must be a line of what the commands print
  together.
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


def commands_of(body):
    joined, current = [], ""
    for line in body:
        text = re.sub(r"\s+#.*$", "", line.rstrip())
        if not text.strip():
            continue
        if text.endswith("\\"):
            current += text[:-1] + " "
            continue
        joined.append((current + text).strip())
        current = ""
    return joined


def claims(path):
    """(line number, commands, expected lines, excerpt) for each command block shown with its output."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```sh":
            i += 1
            continue
        start = i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        i += 1
        j = i
        while j < len(lines) and not lines[j].strip():
            j += 1
        expected, excerpt = None, True
        if j < len(lines) and lines[j].strip() == "```":  # a plain block: the output, or part of it
            j += 1
            expected = []
            while j < len(lines) and lines[j].strip() != "```":
                expected.append(lines[j])
                j += 1
        else:
            prose = []
            while j < len(lines) and lines[j].strip() and not lines[j].startswith("    "):
                prose.append(lines[j])
                j += 1
            said = " ".join(prose)
            excerpt = not re.search(r"\bprints:$", said.rstrip())
            if prose and re.search(r"\bprints\b", said) and prose[-1].rstrip().endswith(":"):
                while j < len(lines) and not lines[j].strip():
                    j += 1
                expected = []
                while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                    expected.append(lines[j][4:])
                    j += 1
        if expected is None:
            continue
        excerpt = excerpt or any(line.lstrip().startswith("...") for line in expected)
        expected = [line for line in expected if line.strip() and not line.lstrip().startswith("...")]
        if expected:
            out.append((start + 1, commands_of(body), expected, excerpt))
    return out


class DocsOutputs(unittest.TestCase):
    def test_every_shown_output(self):
        files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
        os.makedirs(os.path.join(ROOT, "out"), exist_ok=True)
        checked = 0
        for path in files:
            for line, commands, expected, excerpt in claims(path):
                where = f"{os.path.relpath(path, ROOT)}:{line}"
                printed = []
                for command in commands:
                    args = shlex.split(command)
                    self.assertEqual(args[0], "build/kvsim", f"{where}: only kvsim commands are checked: {command}")
                    result = subprocess.run([EXE] + args[1:], cwd=ROOT, capture_output=True, text=True)
                    self.assertEqual(result.returncode, 0, f"{where}: {command}\n{result.stderr}")
                    printed += [p.rstrip() for p in result.stdout.split("\n")]
                if not excerpt:
                    whole = [p for p in printed if p.strip()]
                    shown = [want.rstrip() for want in expected]
                    self.assertEqual(whole, shown, f"{where}: shows the whole output (say 'prints (excerpt):' if not)")
                at = 0
                for want in expected:
                    while at < len(printed) and printed[at] != want.rstrip():
                        at += 1
                    self.assertLess(at, len(printed), f"{where}: expected the line\n{want}\nin\n" + "\n".join(printed))
                    at += 1
                checked += 1
                print(f"ok {where}: {len(commands)} command(s), {len(expected)} lines{' (excerpt)' if excerpt else ''}")
        self.assertGreater(checked, 0)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
