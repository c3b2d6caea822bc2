"""docs/traces.md's commands and figures, where no GPU is needed to check them.

- Every command in its ```sh blocks is checked: `python3 -m kvsim.dump ...` must parse with
  the dumper's own parser (kvsim.dump.build_parser, what --help prints), `build/kvsim VERB ...`
  may use only options `kvsim VERB --help` lists, and the prompts one-liner is run on two
  texts and must give a file the dumper reads. A command of any other kind fails the test
  (add a check for it).
- The walkthrough's figures: the bytes of q/k/v follow from the Llama-3.1-8B card
  (data/models) and the schema; the lines shown for `kvsim validate` and `kvsim info` are what
  they print for a trace of that shape written by the dumper's writer (8 sequences of 4
  tokens here, the counts scaled to 4,096), and that writer's file is the q/k/v bytes plus
  its metadata (no compression).
- The prompts example (```jsonl) reads with the dumper's reader, into the sequences and
  spans the text says.
"""

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXE = os.environ.get("KVSIM_EXE", os.path.join(ROOT, "build", "kvsim"))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from check_outputs import commands_of  # noqa: E402

DOC = os.path.join(ROOT, "docs", "traces.md")
TOKENS, SEQS = 4096, 8


def blocks(text, kind):
    return [m.group(1).split("\n") for m in re.finditer(r"```" + kind + r"\n(.*?)\n\s*```", text, re.S)]


def without_env(args):
    while args and re.match(r"^[A-Z_]+=", args[0]):
        args = args[1:]
    return args


class DumpWalkthrough(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(DOC, encoding="utf-8") as f:
            cls.text = f.read()
        with open(os.path.join(ROOT, "data", "models", "llama-3.1-8b.json"), encoding="utf-8") as f:
            cls.card = json.load(f)

    def test_every_command(self):
        from kvsim import dump

        checked = 0
        for block in blocks(self.text, "sh"):
            for command in commands_of(block):
                checked += 1
                args = without_env(shlex.split(command))
                with self.subTest(command=command):
                    if args[:3] == ["python3", "-m", "kvsim.dump"]:
                        try:
                            with contextlib.redirect_stdout(io.StringIO()):
                                dump.build_parser().parse_args(args[3:])
                        except SystemExit as e:
                            self.assertEqual((e.code, args[3:]), (0, ["--help"]), command)
                    elif args[0] == "build/kvsim":
                        self.check_cli(args[1], args[2:])
                    elif args[:2] == ["python3", "-c"] and args[-2:] == [">", "prompts.jsonl"]:
                        self.check_prompts_command(command)
                    else:
                        self.fail(f"docs/traces.md: no check for this command: {command}")
        self.assertGreaterEqual(checked, 6)

    def check_cli(self, verb, args):
        r = subprocess.run([EXE, verb, "--help"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, f"kvsim {verb} --help: {r.stderr}")
        for arg in args:
            if arg.startswith("--"):
                self.assertRegex(r.stdout, r"--" + re.escape(arg[2:].split("=")[0]) + r"\b", f"kvsim {verb}")

    def check_prompts_command(self, command):
        from kvsim import dump

        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "texts"))
            texts = ["Call me Ishmael.\nSome years ago", 'A "quoted" line, and a tab\there.']
            for i, text in enumerate(texts):
                with open(os.path.join(d, "texts", f"{i}.txt"), "w", encoding="utf-8") as f:
                    f.write(text)
            command = command.replace("python3 ", f"{sys.executable} ", 1)
            r = subprocess.run(["bash", "-c", command], cwd=d, capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            prompts = dump.read_prompts(os.path.join(d, "prompts.jsonl"))
            self.assertEqual([p["prompt"] for p in prompts], texts)

    def test_prompts_example(self):
        """The ```jsonl example reads with the dumper's reader into the sequences the text counts,
        its spans on the characters it names."""
        from kvsim import dump

        (block,) = blocks(self.text, "jsonl")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "prompts.jsonl")
            with open(path, "w", encoding="utf-8") as f:
                f.write("\n".join(block) + "\n")
            read = dump.read_prompts(path)
        self.assertIn("These three lines make four sequences", self.text)
        self.assertEqual((len(block), len(read)), (3, 4))
        self.assertEqual([p.get("context_group") for p in read], [None, 0, 0, None])
        self.assertEqual([read[0]["context"][s["start"]:s["end"]] for s in read[0]["spans"]], ["7391"])

    def test_figures(self):
        c = self.card
        per_token = c["n_layers"] * (c["n_heads"] + 2 * c["n_kv_heads"]) * c["head_dim"] * 2
        self.assertEqual(per_token, 393216)
        self.assertIn(f"= {per_token:,} bytes per token", self.text)
        self.assertIn(f"{SEQS * TOKENS:,} tokens make {per_token * SEQS * TOKENS:,} bytes", self.text)
        self.assertIn(f"--prompt-tokens 3840 --max-new-tokens {TOKENS - 3840}", self.text)

    def test_shown_lines(self):
        """validate's and info's lines, on a trace of the Llama-3.1-8B shape (4 tokens a sequence)."""
        import numpy as np

        from kvsim.tracefile import TraceWriter

        c = self.card
        n = 4
        shown_validate = blocks(self.text, "text")[0]
        shown_info = blocks(self.text, "text")[1]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "llama-3.1-8b-8x4k.h5")
            rng = np.random.default_rng(0)
            with TraceWriter(path, model=c["hf_id"], source="hf-dump", n_layers=c["n_layers"], n_heads=c["n_heads"],
                             n_kv_heads=c["n_kv_heads"], head_dim=c["head_dim"]) as w:
                for s in range(SEQS):
                    seq = w.begin_sequence(np.arange(n, dtype=np.int32), prompt_len=3)
                    for layer in range(c["n_layers"]):
                        seq.write_layer(layer, q=rng.standard_normal((c["n_heads"], n, c["head_dim"])),
                                        k=rng.standard_normal((c["n_kv_heads"], n, c["head_dim"])),
                                        v=rng.standard_normal((c["n_kv_heads"], n, c["head_dim"])))
                    seq.finish()
            raw = SEQS * n * c["n_layers"] * (c["n_heads"] + 2 * c["n_kv_heads"]) * c["head_dim"] * 2
            size = os.path.getsize(path)
            self.assertGreaterEqual(size, raw)
            self.assertLess(size - raw, 4e6, "docs/traces.md: the writer's metadata is about 3 MB")
            self.assertIn("plus about 3 MB of HDF5 metadata", self.text)

            def scaled(line):  # the counts of 4-token sequences, as 4,096-token ones
                slices = SEQS * c["n_layers"] * (c["n_heads"] + 2 * c["n_kv_heads"])
                values = slices * n * c["head_dim"]
                return (line.replace(f"{SEQS * n} tokens", f"{SEQS * TOKENS} tokens")
                        .replace(f"{slices} head slices", f"{slices} head slices")
                        .replace(f"{values} values", f"{values // n * TOKENS} values"))

            r = subprocess.run([EXE, "validate", os.path.basename(path)], cwd=d, capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual([scaled(line) for line in r.stdout.strip().splitlines()[-1:]], shown_validate)
            r = subprocess.run([EXE, "info", path], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            printed = [scaled(line.rstrip()) for line in r.stdout.splitlines()]
            at = 0
            for want in shown_info:  # in this order, other lines between them
                while at < len(printed) and printed[at] != want:
                    at += 1
                self.assertLess(at, len(printed), f"expected the line\n{want}\nin\n" + "\n".join(printed))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
