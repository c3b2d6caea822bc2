"""Tests of the Python tools in trace/python (kvsim package).

Run from the repository root:
    PYTHONPATH=trace/python /usr/bin/python3 -m unittest discover -s tests/python -t .
(trace/python is also put on sys.path here, so PYTHONPATH is optional.)
"""
import os
import sys

_PKG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "trace", "python")
if os.path.normpath(_PKG) not in [os.path.normpath(p) for p in sys.path]:
    sys.path.insert(0, os.path.normpath(_PKG))
