"""pip install of kvsim into a fresh venv, then the Python tests against the installed package.

    pip_install.py SOURCE_DIR BUILD_DIR WORK_DIR

As docs/guide.md says: a venv made with --system-site-packages (Debian's numpy, h5py, pandas),
`pip install --no-build-isolation --no-index .` from SOURCE_DIR. setup.py builds the module
and the program with CMake; here it builds them in BUILD_DIR, the build tree ctest runs in
(KVSIM_CMAKE_BUILD_DIR), where they are already built, so the install costs no compiling.
With KVSIM_PIP_FROM_SDIST=1 the venv installs the sdist instead, which configures and compiles
from scratch in a temporary folder (minutes).

Also: the sdist holds every file the CMake build needs; a wheel holds the module, the program
(bin/kvsim) and the bundled data (share/kvsim). Then, from a folder outside the source tree
(no PYTHONPATH): `import kvsim` is the installed package, `kvsim` on the venv's PATH is the
installed program, docs/tour.ipynb runs in the venv registered as its Jupyter kernel as
docs/guide.md says, and tests/python's test*.py run against both (test_module compares every function with the installed CLI). Exit code 77 (ctest SKIP_RETURN_CODE) when venv, ensurepip,
setuptools, wheel or build are missing, with the reason."""

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile

SKIP = 77


def log(text):
    print(f"pip_install: {text}", flush=True)


def run(args, **kw):
    log("$ " + " ".join(args))
    start = time.monotonic()
    r = subprocess.run(args, **kw)
    if r.returncode != 0:
        log(f"failed with exit code {r.returncode}")
        sys.exit(1)
    log(f"  {time.monotonic() - start:.1f} s")
    return r


def needed_files(source):
    """The files the CMake build of the module and the program reads: CMakeLists.txt, cmake/,
    trace/, sim/, gui/, python/ and data/ (what MANIFEST.in puts in the sdist)."""
    out = {"CMakeLists.txt", "setup.py", "pyproject.toml", "README.md"}
    for top in ("cmake", "trace", "sim", "gui", "python", "data"):
        for folder, dirs, files in os.walk(os.path.join(source, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__" and not d.endswith(".egg-info")]
            for name in files:
                if not name.endswith(".pyc"):
                    out.add(os.path.relpath(os.path.join(folder, name), source))
    return out


def main():
    source, build, work = (os.path.abspath(a) for a in sys.argv[1:4])
    for module in ("venv", "ensurepip", "setuptools", "wheel", "build"):
        if importlib.util.find_spec(module) is None:
            print(f"SKIP: pip install into a venv: {sys.executable} has no module {module}; Debian: "
                  "python3-venv python3-setuptools python3-wheel python3-build (scripts/setup.sh)")
            return SKIP
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    venv, dist, outside = (os.path.join(work, d) for d in ("venv", "dist", "elsewhere"))
    os.makedirs(outside)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KVSIM_DATA_DIR", "KVSIM_EXE")}
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    env["PIP_NO_CACHE_DIR"] = "1"  # nothing written to ~/.cache/pip
    from_sdist = os.environ.get("KVSIM_PIP_FROM_SDIST") == "1"
    reuse = dict(env, KVSIM_CMAKE_BUILD_DIR=build)

    run([sys.executable, "-m", "venv", "--system-site-packages", venv])
    pip = os.path.join(venv, "bin", "pip")
    python = os.path.join(venv, "bin", "python")

    # The sdist: every file the build needs.
    run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", dist, source], env=env,
        stdout=subprocess.DEVNULL)
    sdist = os.path.join(dist, "kvsim-0.1.0.tar.gz")
    with tarfile.open(sdist) as tar:
        held = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    missing = sorted(needed_files(source) - held)
    if missing:
        log(f"the sdist lacks {len(missing)} files the build needs: {', '.join(missing[:10])}")
        return 1
    log(f"{os.path.basename(sdist)}: {len(held)} files, {os.path.getsize(sdist) / 1e6:.1f} MB")

    # A wheel of the source tree (built as pip install . builds it).
    run([pip, "wheel", "--no-build-isolation", "--no-index", "--no-deps", "--wheel-dir", dist, "."], cwd=source,
        env=reuse, stdout=subprocess.DEVNULL)
    wheel = next(os.path.join(dist, f) for f in os.listdir(dist) if f.endswith(".whl"))
    with zipfile.ZipFile(wheel) as z:
        infos = {i.filename: i for i in z.infolist()}
    data = "kvsim-0.1.0.data/data/"
    for name in ("kvsim/__init__.py", "kvsim/_api.py", "kvsim/dump.py", data + "bin/kvsim",
                 data + "share/kvsim/traces/stories15M-8x256.h5", data + "share/kvsim/models/llama-3.1-8b.json",
                 data + "share/kvsim/gpus/h100-80gb.json"):
        if name not in infos:
            log(f"{os.path.basename(wheel)} lacks {name}")
            return 1
    if not any(n.startswith("kvsim/_kvsim") and n.endswith(".so") for n in infos):
        log(f"{os.path.basename(wheel)} lacks the compiled module kvsim/_kvsim*.so")
        return 1
    if not (infos[data + "bin/kvsim"].external_attr >> 16) & 0o111:
        log("bin/kvsim is not executable in the wheel")
        return 1
    log(f"{os.path.basename(wheel)}: {len(infos)} files, {os.path.getsize(wheel) / 1e6:.1f} MB")

    # The install, as docs/guide.md shows it (or from the sdist, compiling everything).
    if from_sdist:
        run([pip, "install", "--no-build-isolation", "--no-index", sdist], cwd=outside, env=env)
    else:
        run([pip, "install", "--no-build-isolation", "--no-index", "."], cwd=source, env=reuse)

    # From a folder outside the source tree, with no PYTHONPATH: the installed package and program.
    venv_env = dict(env, PATH=os.path.join(venv, "bin") + os.pathsep + env.get("PATH", ""))
    where = subprocess.run([python, "-c", "import kvsim, kvsim._kvsim as n; print(kvsim.__file__); "
                            "print(n.__file__); print(kvsim.data_dir())"], cwd=outside, env=venv_env,
                           capture_output=True, text=True)
    if where.returncode != 0:
        log(f"import kvsim failed: {where.stderr.strip()}")
        return 1
    real_venv = os.path.realpath(venv)
    for path in where.stdout.split():
        log(f"  {path}")
        if not os.path.realpath(path).startswith(real_venv + os.sep):
            log(f"{path} is not in the venv {venv}")
            return 1
    program = shutil.which("kvsim", path=venv_env["PATH"])
    if program is None or os.path.realpath(program) != os.path.realpath(os.path.join(venv, "bin", "kvsim")):
        log(f"kvsim on the venv's PATH is {program}, not {venv}/bin/kvsim")
        return 1
    run(["kvsim", "info", os.path.join(where.stdout.split()[2], "traces", "stories15M-8x256.h5")], cwd=outside,
        env=venv_env)

    # docs/tour.ipynb in the venv registered as its kernel as docs/guide.md says (a Jupyter
    # outside the venv, the kernel inside, no PYTHONPATH), into a HOME of its own here.
    notebook = subprocess.run([sys.executable, os.path.join(source, "tests", "docs", "run_notebook.py"),
                               os.path.join(source, "docs", "tour.ipynb"), os.path.join(work, "notebook"),
                               "--python", python], cwd=outside, env=venv_env)
    if notebook.returncode == SKIP:
        log("docs/tour.ipynb not run (above)")
    elif notebook.returncode != 0:
        log(f"docs/tour.ipynb failed in the venv's kernel ({notebook.returncode})")
        return 1

    test_env = dict(venv_env, KVSIM_EXE=program, KVSIM_REQUIRE_NATIVE="1", KVSIM_INSTALLED=venv)
    run([python, "-m", "unittest", "discover", "-v", "-s", os.path.join(source, "tests", "python"), "-t", source],
        cwd=outside, env=test_env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
