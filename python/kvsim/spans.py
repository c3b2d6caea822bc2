"""The rules a trace's spans follow (docs/semantics.md, section 1), as kvsim's reader checks
them (trace/format/schema.cpp, span_problem), for the writer and the dumper's prompts file.
Nothing here imports numpy or h5py."""

from __future__ import annotations

import re

MAX_SPANS = 4096  # per sequence
MAX_NAME_BYTES = 256
_KIND = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _control(text):
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


def valid_utf8(text):
    """False for a str holding a lone surrogate (JSON can escape one: "\\ud800")."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def label_problem(kind, name):
    """Why a span's kind or name breaks the rules ("" when they keep them): the kind is 1..64
    ASCII letters, digits, '_', '-' or '.'; the name 1..256 UTF-8 bytes without control
    characters."""
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        if not isinstance(kind, str):
            return f"kind {kind!r} is not a string"
        if len(kind.encode("utf-8")) <= 64 and not _control(kind):
            return f"kind '{kind}' is not 1..64 letters, digits, '_', '-' or '.'"
        return f"a kind of {len(kind.encode('utf-8', 'replace'))} bytes is not 1..64 letters, digits, '_', '-' or '.'"
    if not isinstance(name, str):
        return f"name {name!r} is not a string"
    if not valid_utf8(name):
        return "the name is not valid UTF-8 (it holds a lone surrogate)"
    size = len(name.encode("utf-8"))
    if not 1 <= size <= MAX_NAME_BYTES or _control(name):
        return f"a name of {size} bytes is not 1..{MAX_NAME_BYTES} bytes without control characters"
    return ""


def span_problem(kind, name, start, end, n_tokens):
    """Why a span of a sequence of n_tokens breaks the rules ("" when it keeps them)."""
    if not 0 <= start < end <= n_tokens:
        return f"range [{start}, {end}) is not within 0..n_tokens ({n_tokens}) with start < end"
    return label_problem(kind, name)
