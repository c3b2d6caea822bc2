#!/usr/bin/env python3
"""docs/architecture.md's table of components against CMake's target links.

Usage: check_architecture.py docs/architecture.md BUILD/component_links.txt

Every target in the table must exist in the folder and with exactly the kvsim links the table lists, every
kvsim target CMake has must be in the table, and no component may link one listed below it
(the table is in the order data flows, so nothing points back up).
"""
import re
import sys


# Optional targets (Qt, pybind11): missing from a build without them.
OPTIONAL = ("kvsim_plot", "kvsim_python", "kvsim_gui_lib")


def table(path):
    text = open(path, encoding="utf-8").read()
    body = text.split("<!-- components:", 1)[1].split("<!-- end components -->", 1)[0]
    rows = []
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[2] in ("target", "---"):
            continue
        target = cells[2].strip("`")
        folder = cells[1].strip("`")
        links = re.findall(r"`([^`]+)`", cells[3])
        rows.append((target, folder, links))
    return rows


def main():
    doc, graph = sys.argv[1], sys.argv[2]
    actual, folders = {}, {}
    for line in open(graph, encoding="utf-8"):
        if ":" in line:
            name, links = line.rstrip("\n").split(":", 1)
            target, _, folders[target] = name.partition(" ")
            actual[target] = links.split()
    rows = table(doc)
    problems = []
    order = [target for target, _, _ in rows]
    for index, (target, folder, links) in enumerate(rows):
        if target not in actual:
            if target not in OPTIONAL:
                problems.append(f"{target}: in the table but not a CMake target")
            continue
        if folder != folders[target]:
            problems.append(f"{target}: the table says it is in '{folder}', CMake '{folders[target]}'")
        links = [link for link in links if link in actual or link not in OPTIONAL]  # built without Qt
        if sorted(links) != sorted(actual[target]):
            problems.append(f"{target}: the table says it links {sorted(links)}, CMake {sorted(actual[target])}")
        for link in actual[target]:
            if link in order and order.index(link) >= index:
                problems.append(f"{target} links {link}, which is not above it: a dependency points back up")
    for target in actual:
        if target not in order:
            problems.append(f"{target}: a CMake target missing from the table")
    for problem in problems:
        print(f"{doc}: {problem}")
    if not problems:
        print(f"{doc}: {len(rows)} components match CMake's target links")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
