"""Tests of the Python tools in python (kvsim package).

Run from the repository root:
    PYTHONPATH=python /usr/bin/python3 -m unittest discover -s tests/python -t .
(python is also put on sys.path here when no kvsim package is importable, so PYTHONPATH
is optional.) The compiled module's tests (test_module) need the build tree's package:
    PYTHONPATH=build/python /usr/bin/python3 -m unittest -v tests.python.test_module
"""
import importlib.util
import os
import sys

_PKG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
if importlib.util.find_spec("kvsim") is None and os.path.normpath(_PKG) not in [os.path.normpath(p) for p in sys.path]:
    sys.path.insert(0, os.path.normpath(_PKG))
