"""Executes a notebook top to bottom with nbconvert, as a reader would run it.

    run_notebook.py NOTEBOOK OUT_DIR [--python PYTHON]

The kernel is the notebook's own (its kernelspec, "kvsim"), registered as docs/guide.md
registers the venv: its `python -m ipykernel install --user --name kvsim` line, run with
PYTHON (default: this interpreter) in place of the guide's venv, under a HOME of its own in
OUT_DIR (nothing is written to the real one). The notebook's kernel name must be the one the
guide registers. The kernel inherits the environment: from a build tree PYTHONPATH holds
build/python; python.installed_package gives the venv's python and no PYTHONPATH.
A copy in OUT_DIR is executed in place by `python3 -m nbconvert --to notebook --execute`
(the kernel runs in OUT_DIR, so files the notebook writes land there); any cell that raises
fails the run. Then the text each code cell printed is shown, so the test's log is the notebook's
output. The stored notebook must carry no outputs (they are made here, never committed).
Exit code 77 (ctest SKIP_RETURN_CODE) with the reason when nbconvert, ipykernel, pandas or
matplotlib does not import."""

import json
import os
import shlex
import shutil
import subprocess
import sys
import time

SKIP = 77


GUIDE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs", "guide.md")


def guide_kernel_command():
    """docs/guide.md's command that registers the venv as a Jupyter kernel, as a list."""
    with open(GUIDE, encoding="utf-8") as f:
        lines = [line for line in f if line.startswith("~/kvsim-venv/bin/python -m ipykernel install ")]
    if len(lines) != 1:
        sys.exit(f"{GUIDE}: expected one `~/kvsim-venv/bin/python -m ipykernel install` command, found {len(lines)}")
    return shlex.split(lines[0])


def home_env(home):
    """This environment with HOME=home and none of the variables that would point Jupyter's
    kernels elsewhere: the kernel is the one registered under `home`."""
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_PATH", "JUPYTER_DATA_DIR", "XDG_DATA_HOME")}
    return dict(env, HOME=home)


def register_kernel(python, home, wanted):
    """Runs the guide's command with `python`, HOME=home; returns the kernel's name, or exits."""
    command = guide_kernel_command()
    name = command[command.index("--name") + 1] if "--name" in command else None
    if name != wanted:
        sys.exit(f"the notebook's kernel is {wanted!r}, but docs/guide.md registers {name!r}: make them agree")
    r = subprocess.run([python] + command[1:], env=home_env(home), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join([python] + command[1:])} failed ({r.returncode}): {r.stderr.strip()}")
    with open(os.path.join(home, ".local", "share", "jupyter", "kernels", name, "kernel.json")) as f:
        argv = json.load(f)["argv"]
    if argv[0] != python:
        sys.exit(f"the kernel {name} runs {argv[0]}, not {python}")
    return name


def main():
    notebook, out = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    python = sys.argv[sys.argv.index("--python") + 1] if "--python" in sys.argv else sys.executable
    for module in ("nbconvert", "nbformat", "ipykernel", "pandas", "matplotlib"):
        try:
            __import__(module)
        except ImportError as e:
            print(f"SKIP: {os.path.basename(notebook)}: {sys.executable} cannot import {module} ({e}); "
                  "Debian: python3-nbconvert python3-ipykernel python3-pandas python3-matplotlib (scripts/setup.sh)")
            return SKIP
    with open(notebook, encoding="utf-8") as f:
        stored = json.load(f)
    with_outputs = [i for i, c in enumerate(stored["cells"])
                    if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))]
    if with_outputs:
        print(f"{notebook}: cells {with_outputs} carry outputs; clear them before committing "
              "(jupyter nbconvert --clear-output --inplace)")
        return 1
    shutil.rmtree(out, ignore_errors=True)
    home = os.path.join(out, "home")
    os.makedirs(home)
    kernel = register_kernel(python, home, stored["metadata"]["kernelspec"]["name"])
    start = time.monotonic()
    name = os.path.basename(notebook)
    copy = os.path.join(out, name)  # the kernel runs in the notebook's folder
    shutil.copyfile(notebook, copy)
    # No --ExecutePreprocessor.kernel_name: the notebook's kernelspec picks the kernel.
    r = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute", "--inplace",
                        "--ExecutePreprocessor.timeout=600", copy], cwd=out, env=home_env(home))
    if r.returncode != 0:
        print(f"{name}: nbconvert failed ({r.returncode})")
        return 1
    with open(copy, encoding="utf-8") as f:
        executed = json.load(f)
    cells = [c for c in executed["cells"] if c["cell_type"] == "code"]
    images = 0
    for i, cell in enumerate(cells, 1):
        print(f"--- [{i}] " + "".join(cell["source"]).split("\n", 1)[0])
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                print("".join(output["text"]), end="")
            elif "data" in output:
                data = output["data"]
                if "image/png" in data:
                    images += 1
                    print("[a figure]")
                elif "text/plain" in data:
                    print("".join(data["text/plain"]))
    print(f"{name}: {len(cells)} code cells ran in the kernel {kernel} ({python}) in "
          f"{time.monotonic() - start:.1f} s, {images} figures; "
          f"executed copy: {copy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
