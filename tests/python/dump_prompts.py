"""kvsim.dump's context lines without torch or transformers (tests/python/fake_hf.py stands in):
character spans worked out by hand, a dumped trace that `kvsim validate` accepts and whose
spans `kvsim info` lists, and hostile lines, each one line and exit code 2."""

import contextlib
import io
import json
import os
import subprocess
import tempfile
import unittest

from kvsim import dump, prompts
from kvsim.tracefile import TraceReader

from . import fake_hf
from .native import EXE

# The hand-worked case. The fake tokenizer's tokens and character offsets:
#   context  "The key is 7391."    The (0,3) key (4,7) is (8,10) 7391 (11,15) . (15,16)
#   question "What is the key?\n"  What (0,4) is (5,7) the (8,11) key? (12,16) \n (16,17)
#   answer   "It is 7391."         It (0,2) is (3,5) 7391 (6,10) . (10,11)
# BOS at 0, so the context is [1, 6), the question [6, 11) (question_len 5), the answer [11, 15).
NEEDLE = {"context": "The key is 7391.", "question": "What is the key?", "answer": "It is 7391.",
          "spans": [{"kind": "needle", "field": "context", "start": 11, "end": 15},       # 7391: [4, 5)
                    {"kind": "needle", "name": "key-digits-dot", "field": "context",
                     "start": 13, "end": 16},                                          # 7391 .: [4, 6)
                    {"kind": "evidence", "field": "question", "start": 8, "end": 15},  # the key?: [8, 10)
                    {"kind": "value", "field": "answer", "start": 6, "end": 10},       # 7391: [13, 14)
                    {"kind": "word", "field": "context", "start": 7, "end": 9}]}       # is: [3, 4)
NEEDLE_SPANS = ("context [1, 6), question [6, 11), answer [11, 15), needle [4, 5), "
                "needle key-digits-dot [4, 6), evidence [8, 10), value [13, 14), word [3, 4)")
STORY = {"context": "Tom had a red ball.", "questions": ["Who?", "What had he?"], "max_new_tokens": 3}


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def run_main(args, model=None, tokenizer=None):
    """dump.main with the stand-ins: (exit code, stdout, stderr, model loads)."""
    out, err = io.StringIO(), io.StringIO()
    with fake_hf.installed(model, tokenizer) as loads, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        rc = dump.main(args)
    return rc, out.getvalue(), err.getvalue(), len(loads)


class PromptsFileTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self._tmp.name, "p.jsonl")

    def tearDown(self):
        self._tmp.cleanup()

    def test_hand_worked_spans(self):
        write_lines(self.path, [NEEDLE])
        p = prompts.encode(prompts.read_prompts(self.path)[0], fake_hf.FastTokenizer())
        self.assertEqual(p["ids"], [1, 3, 4, 5, 6, 7, 8, 5, 9, 10, 11])  # "is" is 5 both times
        self.assertEqual(p["forced"], [12, 5, 6, 7])
        m = prompts.marks(p, 15)
        self.assertEqual(m["question_len"], 5)
        self.assertNotIn("context_group", m)
        self.assertEqual(", ".join(f"{s['kind']}{'' if s['name'] == s['kind'] else ' ' + s['name']} "
                                   f"[{s['start']}, {s['end']})" for s in m["spans"]), NEEDLE_SPANS)
        self.assertEqual(prompts.marks(p, 11)["spans"][2:4], m["spans"][3:5], "no answer: no answer span")

    def test_token_range_overlap(self):
        offsets = [(0, 3), (4, 7), (8, 10), (10, 10), (11, 15)]
        for (start, end), want in {(7, 8): None, (3, 4): None, (6, 9): (1, 3), (10, 11): None,
                                   (0, 1): (0, 1), (9, 12): (2, 5)}.items():
            with self.subTest(span=(start, end)):
                self.assertEqual(prompts.token_range(offsets, start, end), want)

    def test_questions_share_a_context(self):
        write_lines(self.path, [STORY, {"prompt": "Once"}, STORY, {"context": "A.", "questions": ["B?"]}])
        read = prompts.read_prompts(self.path)
        self.assertEqual([p.get("context_group") for p in read], [0, 0, None, 1, 1, None])
        self.assertEqual([p["id"] for p in read], [0, 1, 2, 3, 4, 5])
        tok = fake_hf.FastTokenizer(bos_token_id=None)  # no BOS: the context starts at 0
        a, b = (prompts.encode(p, tok) for p in read[:2])
        self.assertEqual((a["context"], a["ids"][:a["context"][1]]), ((0, 6), b["ids"][:b["context"][1]]))

    def test_old_lines_read_as_before(self):
        write_lines(self.path, ['{"prompt": "Once upon", "max_new_tokens": 5, "id": "a"}', '{"ids": [1, 9]}'])
        self.assertEqual(prompts.read_prompts(self.path),
                         [{"id": "a", "prompt": "Once upon", "ids": None, "max_new_tokens": 5},
                          {"id": 1, "prompt": None, "ids": [1, 9], "max_new_tokens": None}])
        self.assertEqual(prompts.marks(prompts.encode(prompts.read_prompts(self.path)[1]), 2), {})

    def test_hostile_lines(self):
        """Each line after a good one: exit 2, one line naming p.jsonl:2 and the problem, before torch."""
        span = {"kind": "needle", "field": "context", "start": 0, "end": 3}
        ctx = {"context": "The key is 7391.", "question": "What?"}
        bad = {
            '{"context": "A."}': 'needs exactly one of "question" or "questions"',
            '{"question": "B?"}': '"question" needs a "context"',
            '{"context": "A.", "prompt": "x", "question": "B?"}': '"context" and "prompt" exclude each other',
            '{"context": 7, "question": "B?"}': '"context" must be a non-empty string',
            '{"context": "A.", "question": ""}': '"question" must be a non-empty string',
            '{"context": "A.", "question": "B?", "questions": ["C?"]}': "exactly one of",
            '{"context": "A.", "questions": "B?"}': '"questions" must be a non-empty list',
            '{"context": "A.", "questions": ["B?", 3]}': r'"questions"\[1\] must be a non-empty string',
            '{"context": "A\\ud800", "question": "B?"}': "not valid UTF-8",
            '{"context": "A.", "questions": ["B?"], "answer": "C"}': '"answer" goes with one "question"',
            '{"context": "A.", "question": "B?", "answer": "C", "max_new_tokens": 2}': "exclude each other",
            json.dumps(dict(ctx, spans={})): '"spans" must be a list',
            json.dumps(dict(ctx, spans=[3])): "span 0: not an object",
            json.dumps(dict(ctx, spans=[dict(span, end=17)])): r"span 0: \[0, 17\) is not a character range "
                                                               r"within 0..16 \(the context's length\)",
            json.dumps(dict(ctx, spans=[dict(span, start=3, end=3)])): r"\[3, 3\) is not a character range",
            json.dumps(dict(ctx, spans=[dict(span, start=-1)])): "is not a character range",
            json.dumps(dict(ctx, spans=[dict(span, start=1.0)])): "is not a character range",
            json.dumps(dict(ctx, spans=[dict(span, end=True)])): "is not a character range",
            json.dumps(dict(ctx, spans=[dict(span, field="question", end=6)])): r"within 0..5 \(the question's",
            json.dumps(dict(ctx, spans=[dict(span, kind="a needle")])): "kind 'a needle' is not 1..64 letters",
            json.dumps(dict(ctx, spans=[dict(span, kind="k" * 65)])): "a kind of 65 bytes is not 1..64",
            json.dumps(dict(ctx, spans=[dict(span, kind="n\u00e9")])): "kind 'n\u00e9' is not 1..64",
            json.dumps(dict(ctx, spans=[dict(span, kind="")])): "kind '' is not",
            json.dumps(dict(ctx, spans=[dict(span, kind=3)])): "kind 3 is not a string",
            json.dumps(dict(ctx, spans=[dict(span, name="a\tb")])): "a name of 3 bytes is not 1..256 bytes",
            json.dumps(dict(ctx, spans=[dict(span, name="x" * 257)])): "a name of 257 bytes",
            json.dumps(dict(ctx, spans=[dict(span, field="title")])): '"field" must be "context", "question"',
            json.dumps(dict(ctx, spans=[dict(span, field="answer")])): 'a span in the answer needs a line with an "answer"',
            json.dumps({"context": "A.", "questions": ["B?", "C?"], "spans": [dict(span, field="question", end=1)]}):
                'a span in the question needs a line with one "question"',
            json.dumps(dict(ctx, spans=[{"kind": "needle", "start": 0, "end": 1}])): 'span 0: needs "field"',
            json.dumps(dict(ctx, spans=[dict(span, width=2)])): "span 0: unknown key 'width'",
            json.dumps(dict(ctx, spans=[span] * 4094)): "4094 spans; a sequence holds at most 4096",
            '{"prompt": "x", "spans": []}': '"spans" needs a "context"',
            "[1]": "exactly one of",
            "{oops": "not valid JSON",
            "[" * 100000: "not valid JSON",
        }
        out = os.path.join(self._tmp.name, "o.h5")
        for line, msg in bad.items():
            with self.subTest(line=line[:120]):
                write_lines(self.path, [NEEDLE, line])
                rc, stdout, stderr, loads = run_main(["--model", "m", "--prompts", self.path, "--out", out])
                self.assertEqual((rc, stdout, loads), (2, "", 0), stderr)
                self.assertRegex(stderr, f"^kvsim.dump: {self.path}:2: .*{msg}.*\n$")
        write_lines(self.path, [dict(ctx, spans=[span] * 4093)])  # with context, question, answer: 4096
        self.assertEqual(len(prompts.read_prompts(self.path)[0]["spans"]), 4093)


class DumpedTraceTest(unittest.TestCase):
    """dump.main end to end with the stand-ins; the trace read back by kvsim."""

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name
        self.prompts = os.path.join(self.dir, "p.jsonl")
        self.out = os.path.join(self.dir, "t.h5")

    def tearDown(self):
        self._tmp.cleanup()

    def kvsim(self, *args):
        r = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout

    def test_trace_has_the_spans(self):
        write_lines(self.prompts, [NEEDLE, STORY, {"prompt": "Once upon a time"},
                                   {"context": "Sue ran.", "questions": ["Who ran?", "Did Sue run?"]}])
        model = fake_hf.CausalLM()
        rc, stdout, stderr, loads = run_main(
            ["--model", "m", "--prompts", self.prompts, "--out", self.out, "--max-new-tokens", "2"],
            model, fake_hf.FastTokenizer())
        self.assertEqual((rc, loads), (0, 1), stderr)
        self.assertEqual(stdout, f"{self.out}: 6 sequences, 2 layers, 4 heads (2 kv), head_dim 8\n")
        self.assertIn("seq 0 (prompt 0): 11 prompt + 4 given answer tokens", stderr)
        self.assertIn("seq 1 (prompt 1): 9 prompt + 3 generated tokens", stderr)
        with TraceReader(self.out) as r:
            self.assertEqual(r.seq_meta(0), {"n_tokens": 15, "prompt_len": 11, "question_len": 5})
            self.assertEqual(r.tokens(0).tolist(), model.forwards[0])
            self.assertEqual(r.token_text(0)[:6], ["<s>", "The", "key", "is", "7391", "."])
            self.assertEqual([r.seq_meta(i).get("context_group") for i in range(6)], [None, 0, 0, None, 1, 1])
            self.assertEqual(r.seq_meta(3), {"n_tokens": 7, "prompt_len": 5})  # BOS + 4 tokens, 2 generated
            self.assertEqual(r.spans(3), [])
            self.assertEqual(r.tokens(1).tolist()[:7], r.tokens(2).tolist()[:7])
        self.kvsim("validate", self.out)
        info = self.kvsim("info", self.out)
        listed = info[info.index("  seq  spans"):].splitlines()
        self.assertEqual(listed[1:6], [
            f"    0  {NEEDLE_SPANS}",
            "    1  context [1, 7), question [7, 9), answer [9, 12)",     # Tom had a red ball. | Who?\n | 3 new
            "    2  context [1, 7), question [7, 11), answer [11, 14)",   # What had he?\n
            "    4  context [1, 3), question [3, 6), answer [6, 8)",      # Sue ran. | Who ran?\n | 2 new
            "    5  context [1, 3), question [3, 7), answer [7, 9)"])     # Did Sue run?\n

    def test_no_generate_keeps_the_given_answer(self):
        write_lines(self.prompts, [NEEDLE, STORY])
        rc, _, stderr, _ = run_main(["--model", "m", "--prompts", self.prompts, "--out", self.out,
                                     "--no-generate"], fake_hf.CausalLM(), fake_hf.FastTokenizer())
        self.assertEqual(rc, 0, stderr)
        with TraceReader(self.out) as r:
            self.assertEqual([r.seq_meta(i)["n_tokens"] for i in range(3)], [15, 9, 11])
            self.assertEqual(r.spans(1), [{"kind": "context", "name": "context", "start": 1, "end": 7},
                                          {"kind": "question", "name": "question", "start": 7, "end": 9}])
        self.kvsim("validate", self.out)

    def test_tokenizer_problems_stop_before_the_model_loads(self):
        span = {"kind": "gap", "field": "context", "start": 3, "end": 4}  # the space after "The"
        cases = [([dict(NEEDLE, spans=[span])], fake_hf.FastTokenizer(),
                  r":1: span 0 \(gap\) \[3, 4\) of the context covers no token"),
                 ([NEEDLE], fake_hf.FastTokenizer(is_fast=False), ":1: spans need a fast tokenizer"),
                 ([{"ids": [1, 2]}, STORY], None, ":2: a context line needs a Hugging Face tokenizer"),
                 ([{"context": "   ", "question": "Why?"}], fake_hf.FastTokenizer(), ":1: the context has no tokens")]
        for lines, tokenizer, msg in cases:
            with self.subTest(msg=msg):
                write_lines(self.prompts, lines)
                rc, _, stderr, loads = run_main(["--model", "m", "--prompts", self.prompts, "--out", self.out],
                                                fake_hf.CausalLM(), tokenizer)
                self.assertEqual((rc, loads), (2, 0), stderr)
                self.assertRegex(stderr, f"^kvsim.dump: {self.prompts}{msg}.*\n$")
        write_lines(self.prompts, [STORY])
        rc, _, stderr, _ = run_main(["--model", "m", "--prompts", self.prompts, "--out", self.out,
                                     "--prompt-tokens", "4"], fake_hf.CausalLM(), fake_hf.FastTokenizer())
        self.assertEqual(rc, 2)
        self.assertIn(":1: --prompt-tokens cuts plain prompts only", stderr)
        self.assertFalse(os.path.exists(self.out))


if __name__ == "__main__":
    unittest.main()
