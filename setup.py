"""The build behind `pip install .` (pyproject.toml holds the metadata).

build_ext configures kvsim's CMake project and builds two of its targets: the module
kvsim._kvsim and the kvsim program. The wheel holds the package (kvsim/, with the module),
the program in bin/ (with kvsim-plot.so in lib/kvsim/ when Qt was found) and the bundled data
in share/kvsim/, where the module and the program look for it.

Two builds of one checkout at once (two `pip install .`, or pip and `python3 -m build`) would
write the same build-python/ (CMake's folder, setuptools' lib and bdist folders) and
python/kvsim.egg-info: each run of this file holds an exclusive lock on build-python/.lock
(flock, released when the process ends, even killed), so the second waits for the first and
then reuses what it compiled.

Environment:
  KVSIM_CMAKE_BUILD_DIR       the CMake build folder (default: build-python/cmake here). It is
                              kept, so the next pip install recompiles only what changed. A
                              folder already configured for this source tree (e.g. build/) is
                              built as it is, not configured again.
  KVSIM_CMAKE_ARGS            extra options for a new configure, e.g. -DKVSIM_ARCH=x86-64 for a
                              wheel that runs on any x86-64 (the default uses AVX2 when the
                              build machine has it)
  CMAKE_BUILD_PARALLEL_LEVEL  compile jobs (default: the number of cores)
"""

import contextlib
import glob
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    from setuptools.command.install_data import install_data
except ImportError:  # setuptools < 69 (Debian bookworm's 66): distutils' own, as setuptools provides it
    from distutils.command.install_data import install_data

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD_BASE = "build-python"  # setuptools' default build/ is kvsim's CMake build folder


@contextlib.contextmanager
def build_lock(folder):
    """Holds an exclusive lock on folder/.lock (made if missing) while the block runs; says so
    on stderr while it waits for another holder."""
    import fcntl

    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, ".lock"), "a+", encoding="utf-8") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"kvsim setup.py: waiting for another build of this checkout ({folder}/.lock)", file=sys.stderr,
                  flush=True)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def cmake_build_dir():
    return os.path.abspath(os.environ.get("KVSIM_CMAKE_BUILD_DIR") or os.path.join(ROOT, BUILD_BASE, "cmake"))


def cache_value(build, name):
    with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split("=", 1)[1].strip()
    return None


class CMakeBuild(build_ext):
    """Builds kvsim._kvsim and kvsim with CMake, then copies the module where setuptools wants it."""

    def run(self):
        build = cmake_build_dir()
        if os.path.isfile(os.path.join(build, "CMakeCache.txt")):
            home = cache_value(build, "CMAKE_HOME_DIRECTORY")
            if home is None or os.path.realpath(home) != os.path.realpath(ROOT):
                sys.exit(f"kvsim setup.py: {build} is configured for {home}, not {ROOT}; "
                         "set KVSIM_CMAKE_BUILD_DIR to another folder")
        else:
            os.makedirs(build, exist_ok=True)
            args = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                    f"-DPython_EXECUTABLE={sys.executable}", "-DKVSIM_PYTHON=ON", "-DKVSIM_TESTS=OFF",
                    "-DKVSIM_BENCH=OFF"]
            if shutil.which("ninja"):
                args += ["-G", "Ninja"]
            args += shlex.split(os.environ.get("KVSIM_CMAKE_ARGS", ""))
            self.announce(" ".join(args), level=2)
            subprocess.check_call(args)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(self.parallel or os.cpu_count() or 1)
        try:
            subprocess.check_call(["cmake", "--build", build, "--target", "kvsim_python", "kvsim", "-j", jobs])
        except subprocess.CalledProcessError:
            sys.exit(f"kvsim setup.py: building kvsim_python and kvsim in {build} failed (above); the module "
                     "needs pybind11-dev and python3-dev (scripts/setup.sh) and -DKVSIM_PYTHON=ON")

        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = glob.glob(os.path.join(build, "python", "kvsim", "_kvsim*.so"))
        if len(built) != 1 or not built[0].endswith(suffix):
            sys.exit(f"kvsim setup.py: expected {build}/python/kvsim/_kvsim{suffix} (a module for "
                     f"{sys.executable}), found {built or 'none'}; configure the build for this Python")
        target = self.get_ext_fullpath("kvsim._kvsim")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


class InstallData(install_data):
    """The bundled data, and the program (and its plot module) that build_ext built."""

    def run(self):
        build = cmake_build_dir()
        self.data_files = list(self.data_files or []) + [("bin", [os.path.join(build, "kvsim")])]
        plot = os.path.join(build, "kvsim-plot.so")
        if os.path.isfile(plot):
            self.data_files.append(("lib/kvsim", [plot]))
        super().run()


def data_files():
    def files(pattern):
        return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern)))

    return [("share/kvsim/models", files("data/models/*.json")),
            ("share/kvsim/gpus", files("data/gpus/*.json")),
            ("share/kvsim/traces", ["data/traces/stories15M-8x256.h5", "data/traces/prompts.txt"]),
            ("share/kvsim/prompts", ["data/prompts/qa-stories.jsonl"]),
            ("share/kvsim", ["data/README.md"])]


if __name__ == "__main__":  # setuptools runs this file as __main__; tests import build_lock
    with build_lock(os.path.join(ROOT, BUILD_BASE)):
        setup(
            ext_modules=[Extension("kvsim._kvsim", sources=[])],
            cmdclass={"build_ext": CMakeBuild, "install_data": InstallData},
            data_files=data_files(),
            options={"build": {"build_base": BUILD_BASE}},
        )
