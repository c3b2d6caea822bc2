"""Compares two kvsim_dump_values files: how many float32 values differ, and the largest
relative difference |a - b| / max(|a|, |b|). Usage: python3 bench/compare_values.py A B"""
import array
import sys


def load(path):
    values = array.array("f")
    with open(path, "rb") as f:
        values.frombytes(f.read())
    return values


a, b = load(sys.argv[1]), load(sys.argv[2])
if len(a) != len(b):
    sys.exit(f"different lengths: {len(a)} and {len(b)} values")
differ, worst, at = 0, 0.0, -1
for i, (x, y) in enumerate(zip(a, b)):
    if x == y or (x != x and y != y):
        continue
    differ += 1
    relative = abs(x - y) / max(abs(x), abs(y))
    if relative > worst:
        worst, at = relative, i
print(f"{len(a)} values, {differ} differ, largest relative difference {worst:.3g}" +
      (f" (value {at}: {a[at]} and {b[at]})" if at >= 0 else ""))
