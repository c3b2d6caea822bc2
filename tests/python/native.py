"""What the tests of the compiled module share: whether kvsim._kvsim imports (required where
KVSIM_REQUIRE_NATIVE=1), the repository root, the bundled trace and the kvsim program
(KVSIM_EXE, else the build tree's)."""

import os

try:
    from kvsim import _kvsim  # noqa: F401

    NATIVE = True
except ImportError as e:
    NATIVE = False
    if os.environ.get("KVSIM_REQUIRE_NATIVE") == "1":
        raise ImportError(f"the compiled module kvsim._kvsim is required here: {e}") from e

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TRACE = os.path.join(ROOT, "data", "traces", "stories15M-8x256.h5")
EXE = os.environ.get("KVSIM_EXE", os.path.join(ROOT, "build", "kvsim"))
