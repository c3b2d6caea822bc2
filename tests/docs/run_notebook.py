"""Executes a notebook top to bottom with nbconvert, as a reader would run it.

    run_notebook.py NOTEBOOK OUT_DIR

A copy in OUT_DIR is executed in place by `python3 -m nbconvert --to notebook --execute`
(the kernel runs in OUT_DIR, so files the notebook writes land there); any cell that raises
fails the run. Then the text each code cell printed is shown, so the test's log is the notebook's
output. The stored notebook must carry no outputs (they are made here, never committed).
Exit code 77 (ctest SKIP_RETURN_CODE) with the reason when nbconvert, ipykernel, pandas or
matplotlib does not import."""

import json
import os
import shutil
import subprocess
import sys
import time

SKIP = 77


def main():
    notebook, out = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
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
    os.makedirs(out)
    start = time.monotonic()
    name = os.path.basename(notebook)
    copy = os.path.join(out, name)  # the kernel runs in the notebook's folder
    shutil.copyfile(notebook, copy)
    r = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute", "--inplace",
                        "--ExecutePreprocessor.timeout=600", copy], cwd=out)
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
    print(f"{name}: {len(cells)} code cells ran in {time.monotonic() - start:.1f} s, {images} figures; "
          f"executed copy: {copy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
