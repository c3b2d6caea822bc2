#!/usr/bin/env python3
"""The shape rules of CONTRIBUTING.md that a script can see.

Usage: check_code_shape.py [ROOT] [--allow FILE]

Fails (exit 1), printing one line per finding, on
- a C++ function longer than MAX_LINES lines (signature to closing brace) in sim/, trace/,
  gui/ or python/ unless a comment line starting `// long:` (saying why it stays long) sits
  in the comment block just above it: `path:line: name (N lines)`;
- a reference to an issue or a stop of work by number, in code, tests or docs (their history
  belongs in CHANGELOG.md and bench/history.md): `path:line: names a numbered issue or stop`.

--allow FILE lists functions still to be split, one `path: name` a line (# comments); they
are reported as notes, not failures. A listed function that is no longer long is a failure,
so the list only shrinks.

C++ is read with a brace-matching heuristic: comments, strings and character literals are
blanked, and a `{` at namespace or class scope whose text since the last `;`, `{` or `}` ends
like a function signature (`...)`, optionally `const`, `noexcept`, `override`, a trailing
return type or a constructor's initialisers) opens a function.
"""
import os
import re
import subprocess
import sys

MAX_LINES = 100
CXX_DIRS = ("sim/", "trace/", "gui/", "python/")
CXX_ENDINGS = (".cpp", ".hpp", ".cc", ".h")
# Where numbered history is kept on purpose.
HISTORY_FILES = ("CHANGELOG.md", "bench/history.md", "tests/docs/check_code_shape.py")
TEXT_ENDINGS = (".cpp", ".hpp", ".cc", ".h", ".c", ".py", ".md", ".txt", ".cmake", ".sh", ".ipynb", ".toml",
                ".cfg", ".json", ".in", ".qml")
NUMBERED = re.compile(r"\b(?:stop|issue)\s+#?[0-9]+", re.IGNORECASE)

CONTAINERS = re.compile(r"(?:^|\s)(?:namespace|class|struct|union|enum)(?:\s|$)|extern\s*\"C\"|^\s*extern\s*$")
CONTROL = re.compile(r"^\s*(?:if|for|while|switch|catch|do|else|try|return)\b")
SIGNATURE_END = re.compile(r"\)\s*(?:const|noexcept(?:\([^)]*\))?|override|final|mutable|&&?|->\s*[\w:<>,\s*&]+|\s)*$")
CTOR_INIT = re.compile(r"\)\s*(?:noexcept\s*)?:(?!:)")
ACCESS = re.compile(r"(?:\s*(?:public|private|protected)\s*:(?!:))*\s*")
NAME = re.compile(r"(~?[A-Za-z_]\w*(?:::~?[A-Za-z_]\w*)*|operator\s*[^\s(]+)\s*\(")


def blank_code(text):
    """The text with comments, strings and character literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_preprocessor(code):
    """Blanks preprocessor lines (and their continuations)."""
    lines = code.split("\n")
    continued = False
    for k, line in enumerate(lines):
        if continued or line.lstrip().startswith("#"):
            continued = line.rstrip().endswith("\\")
            lines[k] = ""
        else:
            continued = False
    return "\n".join(lines)


def exempt(raw_lines, first):
    """Whether the comment block just above line index `first` (0-based) has a `// long:` line."""
    k = first - 1
    while k >= 0 and raw_lines[k].strip().startswith("template"):
        k -= 1
    while k >= 0 and raw_lines[k].strip().startswith("//"):
        if raw_lines[k].strip().startswith("// long:"):
            return True
        k -= 1
    return False


def functions(text):
    """(first line index, name, length in lines) of each function body at namespace or class scope."""
    code = strip_preprocessor(blank_code(text))
    stack = []  # per open brace: "container", "function", "init" (a member's brace initialiser) or "block"
    header_start = 0  # index in code where the text before the next brace begins
    found = []
    starts = {}
    i = 0
    for i, c in enumerate(code):
        if c == ";":
            if all(kind == "container" for kind in stack):
                header_start = i + 1
        elif c == "{":
            header = code[header_start:i]
            at_scope = all(kind == "container" for kind in stack)
            if not at_scope:
                stack.append("block")
                continue
            flat = " ".join(header.split())
            if CONTAINERS.search(flat.split("(")[0]) and "(" not in flat.split("{")[0].split(":")[0]:
                stack.append("container")
                header_start = i + 1
            elif CTOR_INIT.search(flat) and not SIGNATURE_END.search(flat) and re.search(r"[\w>]\s*$", flat):
                stack.append("init")  # Foo() : member_{...}: the header goes on after it
            elif SIGNATURE_END.search(flat) and not CONTROL.match(flat) and "=" not in flat.split("(")[0]:
                stack.append("function")
                lead = ACCESS.match(header)
                first = header_start + (lead.end() if lead else 0)
                starts[len(stack)] = (first, flat)
            else:
                stack.append("block")
        elif c == "}":
            if not stack:
                continue
            kind = stack.pop()
            if kind == "function":
                first, flat = starts.pop(len(stack) + 1)
                m = NAME.search(flat)
                first_line = code.count("\n", 0, first)
                last_line = code.count("\n", 0, i)
                found.append((first_line, m.group(1) if m else flat[:40], last_line - first_line + 1))
            if kind != "init" and all(k == "container" for k in stack):
                header_start = i + 1
    return found


def tracked_files(root):
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
        return sorted(p for p in out.decode().split("\0") if p and os.path.isfile(os.path.join(root, p)))
    except (OSError, subprocess.CalledProcessError):
        paths = []
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith(".") and not d.startswith("build")]
            paths += [os.path.relpath(os.path.join(folder, n), root) for n in names]
        return sorted(paths)


def read_allowlist(path):
    allowed = set()
    if path:
        for line in open(path, encoding="utf-8"):
            line = line.split("#", 1)[0].strip()
            if line:
                file, name = (part.strip() for part in line.split(":", 1))
                allowed.add((file, name))
    return allowed


def main(argv):
    args = list(argv)
    allow_path = None
    if "--allow" in args:
        k = args.index("--allow")
        allow_path = args[k + 1]
        del args[k:k + 2]
    root = args[0] if args else "."
    allowed = read_allowlist(allow_path)
    seen_allowed, long_allowed = set(), set()
    failures, notes = [], []
    for path in tracked_files(root):
        if not path.endswith(TEXT_ENDINGS) and os.path.basename(path) not in ("CMakeLists.txt",):
            continue
        try:
            text = open(os.path.join(root, path), encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        if path not in HISTORY_FILES:
            for number, line in enumerate(text.split("\n"), 1):
                if NUMBERED.search(line):
                    failures.append(f"{path}:{number}: names a numbered issue or stop: {line.strip()[:80]}")
        if not (path.startswith(CXX_DIRS) and path.endswith(CXX_ENDINGS)):
            continue
        raw_lines = text.split("\n")
        for first, name, length in functions(text):
            if length <= MAX_LINES:
                if (path, name) in allowed:
                    seen_allowed.add((path, name))
                continue
            if exempt(raw_lines, first):
                continue
            line = f"{path}:{first + 1}: {name} ({length} lines)"
            if (path, name) in allowed:
                seen_allowed.add((path, name))
                long_allowed.add((path, name))
                notes.append(line + " [allowed for now]")
            else:
                failures.append(line)
    for path, name in sorted(allowed):
        if (path, name) in seen_allowed and (path, name) not in long_allowed:
            failures.append(f"{allow_path}: {path}: {name} is no longer long: remove it from the list")
        elif (path, name) not in seen_allowed:
            failures.append(f"{allow_path}: {path}: {name} not found: remove it from the list")
    for line in notes:
        print("note: " + line)
    for line in failures:
        print(line)
    if failures:
        print(f"{len(failures)} finding(s); a function over {MAX_LINES} lines is split into named steps, or says "
              "why not in a `// long: <why>` comment just above it")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
