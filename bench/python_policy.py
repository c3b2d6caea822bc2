"""What a policy written in Python costs: the C++ h2o against docs/extending.md's numpy H2O
(kvsim.register_policy), the same replay and sweep on the bundled trace, alternating runs.
Prints per run kind the median wall and CPU seconds, and the wall microseconds per step per
cache group (a sweep's cells summed).

    PYTHONPATH=build/python /usr/bin/python3 bench/python_policy.py [--repeat 3] [--threads 1,2]
"""

import argparse
import os
import statistics
import time

import kvsim

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def docs_h2o():
    with open(os.path.join(ROOT, "docs", "extending.md"), encoding="utf-8") as f:
        text = f.read()
    code = text[text.index("\n## A policy in Python\n"):].split("```python\n", 1)[1]
    namespace = {}
    exec(code[:code.index("kvsim.register_policy(")], namespace)  # the class alone
    return namespace["H2O"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()
    kvsim.register_policy("h2o-py", docs_h2o())
    trace = kvsim.open(kvsim.bundled_trace())
    runs = []
    for threads in (int(t) for t in args.threads.split(",")):
        runs.append((f"replay 20%, threads {threads}", threads,
                     lambda p, t=threads: [kvsim.replay(trace, p, "20%", output_error="off", threads=t,
                                                        as_frame=False, records=False)]))
        runs.append((f"sweep 9 budgets, threads {threads}", threads,
                     lambda p, t=threads: [kvsim.sweep(trace, [p], output_error="off", threads=t, as_frame=False)]))
    print(f"{'run':32s} {'policy':7s} {'wall s':>8s} {'CPU s':>8s} {'us/step/group':>14s} {'python/C++':>10s}")
    for name, _, run in runs:
        times = {"h2o": [], "h2o-py": []}
        steps = 0
        for _ in range(args.repeat):
            for policy in times:  # alternating, so a load swing hits both
                wall, cpu = time.perf_counter(), time.process_time()
                out = run(policy)
                times[policy].append((time.perf_counter() - wall, time.process_time() - cpu))
                samples = out[0]["samples"]  # (head, step) pairs: group steps, one head per group here
                steps = int(sum(samples)) if hasattr(samples, "__len__") else int(samples)
        base = statistics.median(w for w, _ in times["h2o"])
        for policy, measured in times.items():
            wall = statistics.median(w for w, _ in measured)
            cpu = statistics.median(c for _, c in measured)
            print(f"{name:32s} {policy:7s} {wall:8.3f} {cpu:8.3f} {wall / steps * 1e6:14.2f} {wall / base:10.1f}")
    print(f"(medians of {args.repeat} runs; a group step: one cache group's step, {trace})")


if __name__ == "__main__":
    main()
