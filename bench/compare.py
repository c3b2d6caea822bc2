#!/usr/bin/python3
"""kvsim against the NumPy reference (bench/reference_replay.py), side by side on the same
trace and grid: checks that every cell's mean, p5 and min retention agree within 1e-6 (and
that occupancy and evictions agree), and prints the wall times and speed ratios, with the
floor (bench/floor.cpp: stream every row once, read + recompute softmax + sum).

  /usr/bin/python3 bench/compare.py --build build            # the whole bundled trace
  /usr/bin/python3 bench/compare.py --build build --seqs 0,1 # a subset (both sides run it)

Both sides replay exactly the same sequences, so the ratios are measured, not extrapolated.
The reference runs single-threaded (BLAS threads pinned to 1); kvsim runs with --threads 1
and with all cores. kvsim runs with --output-error off, since the reference computes
retention only (the default sweep on a trace with v also computes output error: timed too).
Exit status: 0 when everything agrees, 1 when a cell disagrees.
"""
import argparse
import csv
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
POLICIES = "full,scissorhands,h2o,streaming,tova,recent"
BUDGETS = "10%,20%,30%,40%,50%,60%,70%,80%,90%"
TOLERANCE = 1e-6            # retention mean, p5, min: absolute
OCCUPANCY_TOLERANCE = 1e-9  # mean occupancy: relative


def cpu_of_children():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd, env=None):
    """Runs cmd; returns (wall seconds, CPU seconds (user + sys), stdout)."""
    cpu = cpu_of_children()
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
    return wall, cpu_of_children() - cpu, proc.stdout


def median_time(cmd, repeat):
    """(median wall, median CPU, [(wall, cpu)] of each run)."""
    runs = [timed(cmd)[:2] for _ in range(repeat)]
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs), runs


def read_csv(path, key_fields):
    with open(path, newline="") as f:
        return {tuple(row[k] for k in key_fields): row for row in csv.DictReader(f)}


def investigate(args, policy, budget, out, subset, env):
    """Per-token eviction steps of one cell from both sides (reference --survival, kvsim
    replay --survival): the first step where the caches part names the rule that differs."""
    ref_s, kv_s = os.path.join(out, "reference-survival.csv"), os.path.join(out, "kvsim-survival.csv")
    timed([args.python, os.path.join(HERE, "reference_replay.py"), args.trace, "--policies", policy, "--budgets", budget,
           *subset, "--cell", f"{policy}:{budget}", "--survival", ref_s], env)
    timed([os.path.join(args.build, "kvsim"), "replay", args.trace, "--policy", policy, "--budget", budget, *subset,
           "--output-error", "off", "--threads", "0", "--survival", kv_s])
    key = ("seq", "layer", "group", "position")
    ref = read_csv(ref_s, key)
    kv = read_csv(kv_s, key)
    parts = []
    for k, r in ref.items():
        a, b = int(r["eviction_step"]), int(kv[k]["eviction_step"]) if k in kv else None
        if a != b:
            first = min(x for x in (a, b) if x is not None and x >= 0) if any(x is not None and x >= 0 for x in (a, b)) else -1
            parts.append((int(k[0]), int(k[1]), k[2], first, int(k[3]), a, b))
    where = f"reference {ref_s}, kvsim {kv_s}" if args.keep else "--keep DIR keeps the CSVs"
    print(f"  {policy} {budget}: per-token eviction steps ({where}):")
    if not parts:
        print("    identical: the caches agree at every step, so the difference is in the rows' numerics, not a rule")
        return
    parts.sort()
    print(f"    {len(parts)} tokens are evicted at different steps; the first in (sequence, layer, group, step) order:")
    for seq, layer, group, _, position, a, b in parts[:8]:
        print(f"    seq {seq} layer {layer} group {group} position {position}: "
              f"reference evicts it at step {a}, kvsim at step {b} (-1: kept)")


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
        fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        return f"{fields.get('Model name', '?').strip()}, {fields.get('CPU(s)', '?').strip()} CPUs"
    except OSError:
        return platform.processor() or "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("KVSIM_BUILD", os.path.join(ROOT, "build")),
                    help="build directory holding kvsim and bench/kvsim_floor (default: build/ or $KVSIM_BUILD)")
    ap.add_argument("--trace", default=os.path.join(ROOT, "data", "traces", "stories15M-8x256.h5"))
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--budgets", default=BUDGETS)
    ap.add_argument("--seqs", help="sequences for both sides, e.g. 0,1 (default: all)")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each kvsim/floor command (median quoted)")
    ap.add_argument("--reference-repeat", type=int, default=1, help="runs of the NumPy reference (median quoted)")
    ap.add_argument("--python", default="/usr/bin/python3", help="Python with numpy and h5py for the reference")
    ap.add_argument("--keep", help="keep the CSVs in this directory")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE, help="for retention mean, p5, min (default 1e-6)")
    args = ap.parse_args()

    kvsim = os.path.join(args.build, "kvsim")
    floor = os.path.join(args.build, "bench", "kvsim_floor")
    for exe in (kvsim, floor):
        if not os.access(exe, os.X_OK):
            sys.exit(f"{exe} not found: build first (cmake -S . -B build -G Ninja && cmake --build build)")
    out = args.keep or tempfile.mkdtemp(prefix="kvsim-compare-")
    os.makedirs(out, exist_ok=True)
    ref_csv = os.path.join(out, "reference.csv")
    kv_csv = os.path.join(out, "kvsim.csv")
    subset = ["--seqs", args.seqs] if args.seqs else []
    grid = ["--policies", args.policies, "--budgets", args.budgets]

    print(f"machine: {cpu_model()}; {platform.platform()}")
    shown = os.path.relpath(args.trace, ROOT) if os.path.abspath(args.trace).startswith(ROOT + os.sep) else args.trace
    print(f"trace: {shown}; grid: {args.policies} x {args.budgets}"
          f"{'; sequences ' + args.seqs if args.seqs else '; all sequences'}")

    # The NumPy reference, single-threaded.
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    ref_cmd = [args.python, os.path.join(HERE, "reference_replay.py"), args.trace, *grid, *subset, "--csv", ref_csv]
    print(f"\nNumPy reference: {' '.join(ref_cmd)}", flush=True)
    ref_runs = []
    for _ in range(args.reference_repeat):
        wall, cpu, stdout = timed(ref_cmd, env)
        ref_runs.append((wall, cpu))
        print("  " + stdout.strip().splitlines()[-1] + f"; process wall {wall:.2f} s, CPU {cpu:.2f} s", flush=True)
    ref_wall = statistics.median(w for w, _ in ref_runs)
    ref_cpu = statistics.median(c for _, c in ref_runs)

    # kvsim: the same grid, single-threaded and on all cores; then the floor.
    base = [kvsim, "sweep", args.trace, *grid, *subset]
    timed([*base, "--threads", "0", "--output-error", "off", "--csv", kv_csv])  # the CSV compared; warms the page cache
    runs = {}
    for label, extra in (("kvsim sweep, 1 thread", ["--threads", "1", "--output-error", "off"]),
                         ("kvsim sweep, all cores", ["--threads", "0", "--output-error", "off"]),
                         ("kvsim sweep, 1 thread, output error on", ["--threads", "1", "--output-error", "auto"]),
                         ("floor (kvsim_floor), 1 thread", None),
                         ("floor (kvsim_floor), all cores", None)):
        if extra is None:
            threads = "1" if "1 thread" in label else "0"
            cmd = [floor, args.trace, "--threads", threads, *subset]
        else:
            cmd = [*base, *extra]
        runs[label] = median_time(cmd, args.repeat)
        each = ", ".join(f"{w:.3f}/{c:.3f}" for w, c in runs[label][2])
        print(f"{label}: median wall {runs[label][0]:.3f} s, CPU {runs[label][1]:.3f} s of {args.repeat} runs "
              f"(wall/CPU: {each})\n  {' '.join(cmd)}", flush=True)

    # Agreement.
    ref = read_csv(ref_csv, ("policy", "budget"))
    kv = read_csv(kv_csv, ("policy", "budget"))
    stats = ("retention_mean", "retention_p5", "retention_min", "occupancy_mean")
    worst = {s: (0.0, None) for s in stats}
    bad = []
    for key, r in ref.items():
        if key not in kv:
            bad.append(f"{key}: missing from kvsim's CSV")
            continue
        k = kv[key]
        for s in stats:
            diff = abs(float(r[s]) - float(k[s]))
            if s == "occupancy_mean":  # a token count, compared relatively (kvsim's CSV has 10 digits)
                diff /= max(1.0, abs(float(r[s])))
            if diff > worst[s][0]:
                worst[s] = (diff, key)
            if diff > (OCCUPANCY_TOLERANCE if s == "occupancy_mean" else args.tolerance):
                bad.append(f"{key[0]} {key[1]} {s}: reference {float(r[s]):.10f} kvsim {float(k[s]):.10f} (|diff| {diff:.3g})")
        if int(r["evictions"]) != int(k["evictions"]) or int(r["samples"]) != int(k["samples"]):
            bad.append(f"{key[0]} {key[1]} evictions {r['evictions']} vs {k['evictions']}, "
                       f"samples {r['samples']} vs {k['samples']}")
    print(f"\nagreement over {len(ref)} cells (tolerance {args.tolerance:g}):")
    for s in stats:
        diff, key = worst[s]
        what = "relative" if s == "occupancy_mean" else "absolute"
        print(f"  max |reference - kvsim| {s:<15} {diff:.3g} ({what})" + (f"  ({key[0]} {key[1]})" if key else ""))
    if bad:
        print(f"DISAGREEMENT in {len(bad)} values:")
        for line in bad[:40]:
            print("  " + line)
        cells = list(dict.fromkeys(tuple(line.split()[:2]) for line in bad if not line.startswith("(")))[:3]
        for policy, budget in cells:
            investigate(args, policy, budget, out, subset, env)
    else:
        print("  every cell agrees (evictions and sample counts equal too)")

    (t1, c1), (tall, call) = runs["kvsim sweep, 1 thread"][:2], runs["kvsim sweep, all cores"][:2]
    (e1, ec1) = runs["kvsim sweep, 1 thread, output error on"][:2]
    (f1, fc1), (fall, fcall) = runs["floor (kvsim_floor), 1 thread"][:2], runs["floor (kvsim_floor), all cores"][:2]
    print("\nspeed (medians; wall = elapsed, CPU = user + sys of the process):")
    print(f"  {'':36}{'wall s':>9}{'CPU s':>9}   {'ratio (wall)':>13}{'ratio (CPU)':>13}")
    print(f"  {'NumPy reference, 1 thread':36}{ref_wall:9.3f}{ref_cpu:9.3f}")
    print(f"  {'kvsim sweep, 1 thread':36}{t1:9.3f}{c1:9.3f}   {ref_wall / t1:12.1f}x{ref_cpu / c1:12.1f}x"
          "   reference / kvsim (target >= 100x)")
    print(f"  {'kvsim sweep, all cores':36}{tall:9.3f}{call:9.3f}   {ref_wall / tall:12.1f}x{ref_cpu / call:12.1f}x"
          "   reference / kvsim")
    print(f"  {'kvsim sweep, 1 thread, output error':36}{e1:9.3f}{ec1:9.3f}   {ref_wall / e1:12.1f}x{ref_cpu / ec1:12.1f}x"
          "   reference / kvsim (kvsim also computes output error)")
    print(f"  {'floor, 1 thread':36}{f1:9.3f}{fc1:9.3f}   {t1 / f1:12.2f}x{c1 / fc1:12.2f}x   sweep / floor")
    print(f"  {'floor, all cores':36}{fall:9.3f}{fcall:9.3f}   {tall / fall:12.2f}x{call / fcall:12.2f}x   sweep / floor")
    if not args.keep:
        for p in os.listdir(out):
            os.remove(os.path.join(out, p))
        os.rmdir(out)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
