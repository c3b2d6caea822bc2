"""The dumper's prompts file: JSONL read and checked line by line, then each sequence's
token ids, question_len and spans from a Hugging Face tokenizer (docs/traces.md shows the
format). Imports neither torch nor transformers nor numpy.

A line is one JSON object: {"prompt": TEXT} or {"ids": [...]} (a plain prompt, as before), or
{"context": TEXT, "question": TEXT} / {"context": TEXT, "questions": [TEXT, ...]} (a sequence
per question), with optional "id", "max_new_tokens" and, with a context, "answer" (with one
"question": fed after it instead of generating) and "spans" (character ranges of a field).
A context sequence is joined as `kvsim capture --context --question` joins it (kvpress's
pipeline.py, preprocess, for a model without a chat template): BOS (when the tokenizer has
one), the context, then the question with a newline, neither with special tokens; spans
context, question and answer (the answer's tokens, given or generated), and the line's own.
"""

from __future__ import annotations

import json

from .spans import MAX_SPANS, label_problem, valid_utf8

FIELDS = ("context", "question", "answer")
SPAN_KEYS = ("kind", "name", "field", "start", "end")
AUTO_SPANS = 3  # context, question, answer


class DumpError(Exception):
    """A problem the user can fix; the dumper's main() prints it as one line and exits with 2."""


def read_prompts(path):
    """The JSONL prompts file as one dict per sequence: plain prompts as
    {id, prompt | ids, max_new_tokens}; each question of a context line as
    {id, where, context, question, answer, spans, context_group, max_new_tokens}."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise DumpError(f"{path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise DumpError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    out, groups = [], 0
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as e:
            msg = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deeply"
            raise DumpError(f"{where}: not valid JSON ({msg})") from None
        if isinstance(obj, dict) and "context" in obj:
            entries = _context_entries(obj, where, len(out))
            if len(entries) > 1:
                for e in entries:
                    e["context_group"] = groups
                groups += 1
            out.extend(entries)
        else:
            out.append(_plain_entry(obj, where, len(out)))
    if not out:
        raise DumpError(f"{path}: no prompts")
    return out


def _max_new_tokens(obj, where):
    m = obj.get("max_new_tokens")
    if m is not None and (not isinstance(m, int) or isinstance(m, bool) or m < 0):
        raise DumpError(f'{where}: "max_new_tokens" must be a non-negative integer')
    return m


def _plain_entry(obj, where, index):
    for key in ("question", "questions", "answer", "spans"):
        if isinstance(obj, dict) and key in obj:
            raise DumpError(f'{where}: "{key}" needs a "context" (and no "prompt" or "ids")')
    if not isinstance(obj, dict) or ("prompt" in obj) == ("ids" in obj):
        raise DumpError(f'{where}: expected an object with exactly one of "prompt", "ids" or "context"')
    entry = {"id": obj.get("id", index), "prompt": None, "ids": None,
             "max_new_tokens": _max_new_tokens(obj, where)}
    if "prompt" in obj:
        if not isinstance(obj["prompt"], str) or not obj["prompt"]:
            raise DumpError(f'{where}: "prompt" must be a non-empty string')
        entry["prompt"] = obj["prompt"]
    else:
        ids = obj["ids"]
        if not isinstance(ids, list) or not ids or \
                not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            raise DumpError(f'{where}: "ids" must be a non-empty list of token ids')
        entry["ids"] = ids
    return entry


def _text(value, what, where):
    if not isinstance(value, str) or not value:
        raise DumpError(f"{where}: {what} must be a non-empty string")
    if not valid_utf8(value):
        raise DumpError(f"{where}: {what} is not valid UTF-8 (it holds a lone surrogate)")
    return value


def _context_entries(obj, where, index):
    for key in ("prompt", "ids"):
        if key in obj:
            raise DumpError(f'{where}: "context" and "{key}" exclude each other')
    context = _text(obj["context"], '"context"', where)
    if ("question" in obj) == ("questions" in obj):
        raise DumpError(f'{where}: a "context" needs exactly one of "question" or "questions"')
    if "question" in obj:
        questions = [_text(obj["question"], '"question"', where)]
    else:
        if not isinstance(obj["questions"], list) or not obj["questions"]:
            raise DumpError(f'{where}: "questions" must be a non-empty list of non-empty strings')
        questions = [_text(q, f'"questions"[{i}]', where) for i, q in enumerate(obj["questions"])]
    answer = None
    if "answer" in obj:
        if "questions" in obj:
            raise DumpError(f'{where}: "answer" goes with one "question", not with "questions"')
        answer = _text(obj["answer"], '"answer"', where)
        if obj.get("max_new_tokens") is not None:
            raise DumpError(f'{where}: "answer" and "max_new_tokens" exclude each other '
                            "(the answer is fed, nothing is generated)")
    fields = {"context": context, "question": questions[0] if len(questions) == 1 else None,
              "answer": answer}
    spans = _spans(obj.get("spans", []), fields, where)
    m = _max_new_tokens(obj, where)
    return [{"id": obj.get("id", index + i), "where": where, "context": context, "question": q,
             "answer": answer, "spans": spans, "context_group": None, "max_new_tokens": m}
            for i, q in enumerate(questions)]


def _spans(spans, fields, where):
    """The line's spans, checked: {kind, name, field, start, end}, character offsets."""
    if not isinstance(spans, list):
        raise DumpError(f'{where}: "spans" must be a list of objects')
    if len(spans) > MAX_SPANS - AUTO_SPANS:
        raise DumpError(f"{where}: {len(spans)} spans; a sequence holds at most {MAX_SPANS}, "
                        f"its context, question and answer spans included")
    out = []
    for i, s in enumerate(spans):
        at = f"{where}: span {i}"
        if not isinstance(s, dict):
            raise DumpError(f"{at}: not an object")
        unknown = sorted(set(s) - set(SPAN_KEYS))
        if unknown:
            raise DumpError(f"{at}: unknown key {unknown[0]!r} (known: {', '.join(SPAN_KEYS)})")
        for key in ("kind", "field", "start", "end"):
            if key not in s:
                raise DumpError(f'{at}: needs "{key}"')
        problem = label_problem(s["kind"], s.get("name", s["kind"]))
        if problem:
            raise DumpError(f"{at}: {problem}")
        field = s["field"]
        if field not in FIELDS:
            raise DumpError(f'{at}: "field" must be "context", "question" or "answer", not {field!r}')
        text = fields[field]
        if text is None:
            need = 'one "question" (not "questions")' if field == "question" else 'an "answer"'
            raise DumpError(f"{at}: a span in the {field} needs a line with {need}")
        start, end = s["start"], s["end"]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)) or \
                not 0 <= start < end <= len(text):
            raise DumpError(f"{at}: [{start!r}, {end!r}) is not a character range within "
                            f"0..{len(text)} (the {field}'s length) with start < end")
        out.append({"kind": s["kind"], "name": s.get("name", s["kind"]), "field": field,
                    "start": start, "end": end})
    return out


def token_range(offsets, start, end):
    """The tokens whose character range [a, b) overlaps [start, end), as [first, last + 1);
    None when there is none (a zero-width token never overlaps)."""
    hit = [i for i, (a, b) in enumerate(offsets) if a < end and b > start and a < b]
    return (hit[0], hit[-1] + 1) if hit else None


def prompt_ids(p, tokenizer=None, prompt_tokens=None):
    """The token ids of one plain prompt (a dict as read_prompts returns), cut to its first
    prompt_tokens when given; a shorter prompt is a DumpError."""
    ids = p["ids"]
    if ids is None:
        if tokenizer is None:
            raise DumpError(f"prompt {p['id']}: text prompt but no tokenizer; "
                            'give {"ids": [...]} or --tokenizer')
        ids = list(tokenizer(p["prompt"])["input_ids"])
    if prompt_tokens is not None:
        if len(ids) < prompt_tokens:
            raise DumpError(f"prompt {p['id']}: {len(ids)} tokens, fewer than --prompt-tokens {prompt_tokens}")
        ids = ids[:prompt_tokens]
    return list(ids)


def _tokenize(tokenizer, text, offsets, where):
    """(ids, character offsets or None) of text, without special tokens."""
    if not offsets:
        return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]], None
    if not getattr(tokenizer, "is_fast", False):
        raise DumpError(f"{where}: spans need a fast tokenizer (one that returns offset mappings)")
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return [int(i) for i in enc["input_ids"]], [(int(a), int(b)) for a, b in enc["offset_mapping"]]


def encode(p, tokenizer=None, prompt_tokens=None):
    """One sequence's input, from a dict as read_prompts returns (an encoded one is returned as
    it is): {id, max_new_tokens, ids (the prompt), forced (answer ids fed after it, else []),
    question_len, context ([start, end) of the context's tokens), explicit (the line's spans
    in token positions), context_group}; a context line's problems are DumpErrors naming it."""
    if p.get("encoded"):
        return p
    out = {"encoded": True, "id": p["id"], "max_new_tokens": p["max_new_tokens"], "forced": [],
           "question_len": None, "context": None, "explicit": [], "context_group": None}
    if p.get("context") is None:
        out["ids"] = prompt_ids(p, tokenizer, prompt_tokens)
        return out
    where = p["where"]
    if tokenizer is None:
        raise DumpError(f"{where}: a context line needs a Hugging Face tokenizer (--tokenizer)")
    if prompt_tokens is not None:
        raise DumpError(f"{where}: --prompt-tokens cuts plain prompts only, not a context with its question")
    bos = getattr(tokenizer, "bos_token_id", None)
    head = [] if bos is None else [int(bos)]
    want = {s["field"] for s in p["spans"]}
    texts = {"context": p["context"], "question": p["question"] + "\n", "answer": p["answer"]}
    parts, first = {}, {}
    at = len(head)
    for field in FIELDS:
        if texts[field] is not None:
            parts[field] = _tokenize(tokenizer, texts[field], field in want, where)
            if not parts[field][0]:
                raise DumpError(f"{where}: the {field} has no tokens")
            first[field] = at
            at += len(parts[field][0])
    for i, s in enumerate(p["spans"]):
        hit = token_range(parts[s["field"]][1], s["start"], s["end"])
        if hit is None:
            raise DumpError(f"{where}: span {i} ({s['kind']}) [{s['start']}, {s['end']}) of the "
                            f"{s['field']} covers no token")
        base = first[s["field"]]
        out["explicit"].append({"kind": s["kind"], "name": s["name"], "start": base + hit[0],
                                "end": base + hit[1]})
    out["ids"] = head + parts["context"][0] + parts["question"][0]
    out["forced"] = parts["answer"][0] if "answer" in parts else []
    out["question_len"] = len(parts["question"][0])
    out["context"] = (len(head), first["question"])
    out["context_group"] = p["context_group"]
    return out


def marks(enc, n_tokens):
    """begin_sequence's question_len, spans and context_group for an encoded sequence of
    n_tokens (the prompt, then the answer's tokens, given or generated); {} for a plain one."""
    if enc["question_len"] is None:
        return {}
    prompt_len = len(enc["ids"])
    c0, c1 = enc["context"]
    spans = [{"kind": "context", "name": "context", "start": c0, "end": c1},
             {"kind": "question", "name": "question", "start": c1, "end": prompt_len}]
    if n_tokens > prompt_len:
        spans.append({"kind": "answer", "name": "answer", "start": prompt_len, "end": n_tokens})
    out = {"question_len": enc["question_len"], "spans": spans + enc["explicit"]}
    if enc["context_group"] is not None:
        out["context_group"] = enc["context_group"]
    return out
