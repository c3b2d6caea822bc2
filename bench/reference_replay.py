#!/usr/bin/python3
"""Reference replay in NumPy, written from docs/semantics.md (sections 2-4,
"Metrics") and the decisions listed in README.md ("Replaying"), independently of kvsim's C++.

It is what a researcher would write instead of kvsim: read a schema-v1 trace with h5py,
recompute each layer's attention from q and k (softmax of attn_scale * q.k, float64), and
for every policy and budget run a per-step Python loop over each cache group's rows with
NumPy vector operations inside a step. Stream mode only.

Semantics (docs/semantics.md):
- A cache group is one kv head with its query heads (tova: the whole layer).
- At step t, token t is appended; each query head's retention is the sum of its full row a_t
  over the cached positions (the new token included), before the step's eviction.
- The group observes the mean over its heads of a_t renormalised over the cache; then, if
  the cache holds more than B positions, the policy evicts.
- B = max(1, floor(p * n / 100)) for a budget of p%.
- Ties are broken by evicting the lower position first.
- Aggregates over every (sequence, layer, query head, step): mean, numpy's default 5th
  percentile, minimum. Occupancy: the cache size at a step (new token included) averaged
  over every cache group and step.

Usage:
  /usr/bin/python3 bench/reference_replay.py TRACE --policies full,h2o --budgets 10%,20% --csv out.csv
  (--seqs 0,1 --layers 0,1 --survival surv.csv --cell h2o:10%)
"""
import argparse
import collections
import csv
import sys
import time

import h5py
import numpy as np

POLICIES = ("full", "scissorhands", "h2o", "streaming", "tova", "recent")


# ---------------------------------------------------------------- attention rows

def layer_rows(q, k, scale, sliding_window=0, softcap=0.0):
    """All causal softmax rows of one layer: [n_heads, n, n] float64, zero above the diagonal.
    q [n_heads, n, d], k [n_kv_heads, n, d]; query head h uses kv head h // (n_heads / n_kv_heads)."""
    n_heads, n, _ = q.shape
    group = n_heads // k.shape[0]
    q = q.astype(np.float64)
    k = k.astype(np.float64)
    t = np.arange(n)
    masked = t[None, :] > t[:, None]  # key after query
    if sliding_window:
        masked |= (t[:, None] - t[None, :]) >= sliding_window
    rows = np.empty((n_heads, n, n))
    for h in range(n_heads):
        logits = scale * (q[h] @ k[h // group].T)
        if softcap:
            logits = softcap * np.tanh(logits / softcap)
        logits[masked] = -np.inf
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        rows[h] = e / e.sum(axis=1, keepdims=True)
    return rows


# ---------------------------------------------------------------- policies
# observe(t, cache, obs): cache = cached positions ascending (the last is t), obs = the group's
# observed (renormalised) row aligned with it. evict(t, cache, excess) -> indices into cache.

class Full:
    needs_attention = False
    budgeted = False

    def __init__(self, B, n):
        pass

    def observe(self, t, cache, obs):
        pass

    def evict(self, t, cache, excess):
        return []


class Recent(Full):
    """Sliding window of the last B positions."""
    budgeted = True

    def evict(self, t, cache, excess):
        return list(range(excess))


class Streaming(Full):
    """The first 4 positions (sinks) and the most recent B - 4."""
    budgeted = True

    def __init__(self, B, n, sinks=4):
        if B <= sinks:
            raise ValueError("streaming needs B > sinks")
        self.sinks = sinks

    def evict(self, t, cache, excess):
        candidates = np.flatnonzero(cache >= self.sinks)  # ascending: oldest non-sinks first
        return candidates[:excess]


class H2O:
    """Accumulated renormalised attention since the token was cached (own step included);
    the floor(B/2) most recent cached positions (the new one included) are protected; evict
    the lowest score among the rest."""
    needs_attention = True
    budgeted = True

    def __init__(self, B, n):
        self.recent = B // 2
        self.score = np.zeros(n)

    def observe(self, t, cache, obs):
        self.score[cache] += obs

    def evict(self, t, cache, excess):
        candidates = len(cache) - self.recent
        order = np.argsort(self.score[cache[:candidates]], kind="stable")  # ties: lower position
        return order[:excess]


class TOVA:
    """Evict the lowest current-step observed attention (per layer: mean over the layer's heads)."""
    needs_attention = True
    budgeted = True

    def __init__(self, B, n):
        self.obs = None

    def observe(self, t, cache, obs):
        self.obs = obs

    def evict(self, t, cache, excess):
        return np.argsort(self.obs, kind="stable")[:excess]


class Scissorhands:
    """Paper Alg. 2: a token's count = steps s in (t-w, t], s >= its position, with its
    observed attention strictly below 1/(cache size at s); when the cache exceeds B, the r
    most recent cached tokens count 0 (they stay candidates) and the max(m, excess) tokens
    with the largest counts go (ties: lower position first)."""
    needs_attention = True
    budgeted = True

    def __init__(self, B, n, w=400, r=10, m=None):
        self.w, self.r = w, r
        self.m = max(1, B // 2) if m is None else m
        self.count = np.zeros(n, dtype=np.int64)
        self.history = collections.deque()  # per step: the positions below its threshold

    def observe(self, t, cache, obs):
        below = cache[obs < 1.0 / len(cache)]
        self.count[below] += 1
        self.history.append(below)
        if len(self.history) > self.w:  # step t - w leaves the window
            self.count[self.history.popleft()] -= 1

    def evict(self, t, cache, excess):
        counts = self.count[cache].copy()
        if self.r > 0:
            counts[-self.r:] = 0
        order = np.argsort(-counts, kind="stable")  # largest first, ties: lower position
        return order[:max(self.m, excess)]


MAKERS = {"full": Full, "recent": Recent, "streaming": Streaming, "h2o": H2O, "tova": TOVA,
          "scissorhands": Scissorhands}
LAYER_WIDE = {"tova"}


# ---------------------------------------------------------------- replay

def replay_group(rows, heads, policy, B):
    """One cache group through one policy. rows: [n_heads, n, n]. Returns retention
    [len(heads), n], occupancy [n], eviction step per position (-1: kept), evictions."""
    n = rows.shape[1]
    pol = MAKERS[policy](B, n)
    cache = np.empty(0, dtype=np.int64)
    retention = np.empty((len(heads), n))
    occupancy = np.empty(n, dtype=np.int64)
    evicted_at = np.full(n, -1, dtype=np.int64)
    evictions = 0
    group_rows = rows[heads]  # [heads, n, n]
    for t in range(n):
        cache = np.append(cache, t)
        a = group_rows[:, t, cache]  # each head's full row over the cache
        mass = a.sum(axis=1)
        retention[:, t] = mass
        occupancy[t] = len(cache)
        if pol.needs_attention:
            pol.observe(t, cache, (a / mass[:, None]).mean(axis=0))
        excess = len(cache) - B
        if excess > 0 and pol.budgeted:
            victims = np.asarray(pol.evict(t, cache, excess), dtype=np.int64)
            assert len(victims) >= excess
            evicted_at[cache[victims]] = t
            evictions += len(victims)
            cache = np.delete(cache, victims)
    return retention, occupancy, evicted_at, evictions


def resolve_budget(text, n):
    if text.endswith("%"):
        return max(1, (int(text[:-1]) * n) // 100)
    return int(text)


def read_layer(f, seq, layer):
    g = f[f"seqs/{seq}/layers/{layer}"]
    return (g["q"][()], g["k"][()], int(g.attrs.get("sliding_window", 0)),
            float(g.attrs.get("logit_softcap", 0.0)))


def run(trace, policies, budgets, seqs=None, layers=None, survival_cells=()):
    """Returns (cells, timing): cells[(policy, budget)] = dict of aggregates."""
    timing = {"read": 0.0, "rows": 0.0, "replay": 0.0}
    f = h5py.File(trace, "r")
    n_layers, n_heads, n_kv = (int(f.attrs[a]) for a in ("n_layers", "n_heads", "n_kv_heads"))
    scale = float(f.attrs["attn_scale"])
    group = n_heads // n_kv
    if seqs is None:
        seqs = sorted(int(s) for s in f["seqs"].keys())
    if layers is None:
        layers = list(range(n_layers))
    retention = {(p, b): [] for p in policies for b in budgets}
    occupancy = {(p, b): [0, 0] for p in policies for b in budgets}
    evictions = {(p, b): 0 for p in policies for b in budgets}
    survival = []
    for seq in seqs:
        n = int(f[f"seqs/{seq}"].attrs["n_tokens"])
        for layer in layers:
            t0 = time.perf_counter()
            q, k, window, softcap = read_layer(f, seq, layer)
            t1 = time.perf_counter()
            rows = layer_rows(q, k, scale, window, softcap)
            t2 = time.perf_counter()
            for p in policies:
                groups = [list(range(n_heads))] if p in LAYER_WIDE else \
                    [list(range(g * group, (g + 1) * group)) for g in range(n_kv)]
                for b in budgets:
                    B = resolve_budget(b, n)
                    for gi, heads in enumerate(groups):
                        ret, occ, evicted_at, ev = replay_group(rows, heads, p, B)
                        retention[(p, b)].append(ret.ravel())
                        occupancy[(p, b)][0] += int(occ.sum())
                        occupancy[(p, b)][1] += n
                        evictions[(p, b)] += ev
                        if (p, b) in survival_cells:
                            name = "layer" if p in LAYER_WIDE else f"kv{gi}"
                            survival += [(p, b, seq, layer, name, pos, int(s)) for pos, s in enumerate(evicted_at)]
            t3 = time.perf_counter()
            timing["read"] += t1 - t0
            timing["rows"] += t2 - t1
            timing["replay"] += t3 - t2
    cells = {}
    for key, parts in retention.items():
        r = np.concatenate(parts)
        cells[key] = {"retention_mean": float(r.mean()), "retention_p5": float(np.percentile(r, 5)),
                      "retention_min": float(r.min()), "occupancy_mean": occupancy[key][0] / occupancy[key][1],
                      "evictions": evictions[key], "samples": r.size}
    return cells, timing, survival


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--budgets", default="10%,20%,30%,40%,50%,60%,70%,80%,90%")
    ap.add_argument("--seqs", help="e.g. 0,1 (default: all)")
    ap.add_argument("--layers", help="e.g. 0,1 (default: all)")
    ap.add_argument("--csv", help="write one row per (policy, budget)")
    ap.add_argument("--survival", help="write per position the step it was evicted, for --cell cells")
    ap.add_argument("--cell", action="append", default=[], help="policy:budget for --survival (repeatable)")
    args = ap.parse_args()
    policies = args.policies.split(",")
    for p in policies:
        if p not in MAKERS:
            sys.exit(f"unknown policy {p} (the reference has {', '.join(POLICIES)})")
    budgets = args.budgets.split(",")
    seqs = [int(s) for s in args.seqs.split(",")] if args.seqs else None
    layers = [int(s) for s in args.layers.split(",")] if args.layers else None
    cells_wanted = {tuple(c.split(":")) for c in args.cell}
    start = time.perf_counter()
    cells, timing, survival = run(args.trace, policies, budgets, seqs, layers, cells_wanted)
    wall = time.perf_counter() - start
    print(f"{'policy':<14}{'budget':>7}{'mean':>10}{'p5':>10}{'min':>10}{'occupancy':>11}")
    for (p, b), c in cells.items():
        print(f"{p:<14}{b:>7}{c['retention_mean']:>10.4f}{c['retention_p5']:>10.4f}{c['retention_min']:>10.4f}"
              f"{c['occupancy_mean']:>11.2f}")
    print(f"wall {wall:.3f} s (read {timing['read']:.3f} s, rows {timing['rows']:.3f} s, "
          f"replay {timing['replay']:.3f} s)")
    if args.csv:
        with open(args.csv, "w", newline="") as out:
            w = csv.writer(out)
            w.writerow(["policy", "budget", "retention_mean", "retention_p5", "retention_min", "occupancy_mean",
                        "evictions", "samples", "wall_s", "rows_s", "replay_s"])
            for (p, b), c in cells.items():
                w.writerow([p, b, repr(c["retention_mean"]), repr(c["retention_p5"]), repr(c["retention_min"]),
                            repr(c["occupancy_mean"]), c["evictions"], c["samples"], f"{wall:.6f}",
                            f"{timing['rows']:.6f}", f"{timing['replay']:.6f}"])
    if args.survival:
        with open(args.survival, "w", newline="") as out:
            w = csv.writer(out)
            w.writerow(["policy", "budget", "seq", "layer", "group", "position", "eviction_step"])
            w.writerows(survival)


if __name__ == "__main__":
    main()
