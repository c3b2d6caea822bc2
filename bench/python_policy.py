"""What a policy written in Python costs: the C++ h2o against docs/extending.md's numpy H2O
(kvsim.register_policy), and the C++ recent against a Python recent that only evicts (the
adapter's own cost), the same replay and sweep on the bundled trace, runs alternating.
Prints per run the median wall and CPU seconds, wall and CPU microseconds per step per cache
group (a sweep's cells summed), and Python over C++ on CPU time.

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


class Recent:
    """the last B positions, evict only (no observe)"""

    needs_attention = False

    def reset(self, ctx):
        pass

    def observe(self, step, cache, attention):
        pass

    def evict(self, step, cache, excess, compress):
        return cache[:excess] if excess > 0 else None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()
    kvsim.register_policy("h2o-py", docs_h2o())
    kvsim.register_policy("recent-py", Recent)
    trace = kvsim.open(kvsim.bundled_trace())
    runs = []
    for threads in (int(t) for t in args.threads.split(",")):
        runs.append((f"replay 20%, threads {threads}",
                     lambda p, t=threads: kvsim.replay(trace, p, "20%", output_error="off", threads=t,
                                                       as_frame=False, records=False)["samples"]))
        runs.append((f"sweep 9 budgets, threads {threads}",
                     lambda p, t=threads: sum(kvsim.sweep(trace, [p], output_error="off", threads=t,
                                                          as_frame=False)["samples"])))
    print(f"{'run':30s} {'policy':9s} {'wall s':>7s} {'CPU s':>7s} {'wall us':>8s} {'CPU us':>7s} {'py/C++':>6s}")
    for name, run in runs:
        for pair in (("h2o", "h2o-py"), ("recent", "recent-py")):
            times = {p: [] for p in pair}
            for _ in range(args.repeat):
                for policy in pair:  # alternating, so a swing of the load hits both
                    wall, cpu = time.perf_counter(), time.process_time()
                    steps = int(run(policy))  # (head, step) pairs: group steps, one head per group here
                    times[policy].append((time.perf_counter() - wall, time.process_time() - cpu))
            base = statistics.median(c for _, c in times[pair[0]])
            for policy, measured in times.items():
                wall = statistics.median(w for w, _ in measured)
                cpu = statistics.median(c for _, c in measured)
                print(f"{name:30s} {policy:9s} {wall:7.3f} {cpu:7.3f} {wall / steps * 1e6:8.2f} "
                      f"{cpu / steps * 1e6:7.2f} {cpu / base:6.1f}")
    print(f"(medians of {args.repeat} runs; us: per step per cache group; {trace})")


if __name__ == "__main__":
    main()
