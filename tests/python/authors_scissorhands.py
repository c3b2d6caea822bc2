"""scissorhands-official against the authors' loop, written literally in numpy float32.

The loop follows lzcemma/Scissorhands Decentralized_FM_alpha/modules/hf_opt_dropkv.py,
OPTAttention.forward, lines 314-355: the thresholds from the sorted softmax rows, then for
i = start .. n-1 the count over the window's rows (as modified in place), the recent window
forced to 1, the masked row re-softmaxed from the raw scores. kvsim's eviction step of a key
is the row that first masks it, minus one. Run on every sequence, layer and head of the
bundled trace (q, k float16; rows in float32 as kvsim computes them).
"""

import csv
import os
import subprocess
import tempfile
import unittest

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRACE = os.path.join(ROOT, "data", "traces", "stories15M-8x256.h5")
EXE = os.environ.get("KVSIM_EXE", os.path.join(ROOT, "build", "kvsim"))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def authors_masks(logits, window=100, recent=10, start=100):
    """logits [H, n, n] float32 with the future at finfo.min; returns masked [H, n, n] bool,
    the original rows and their thresholds."""
    heads, n, _ = logits.shape
    lowest = np.finfo(np.float32).min
    attn_weights = softmax(logits)
    original = attn_weights.copy()
    mean_score = np.sort(attn_weights, axis=-1)[:, :, int(0.9 * n):int(0.9 * n) + 1]
    masked = np.zeros((heads, n, n), dtype=bool)
    for i in range(start, n):
        window_start = i - window if i - window > 0 else 0
        lru_score = (attn_weights[:, window_start:i, :i] > mean_score[:, window_start:i, :]).sum(axis=1)
        position_window = i - recent if i - recent > 0 else 0
        lru_score[:, position_window:] = 1
        row = logits[:, i, :].copy()
        row[:, :i] = np.where(lru_score == 0, lowest, logits[:, i, :i])
        attn_weights[:, i, :] = softmax(row)
        masked[:, i, :i] = lru_score == 0
    return masked, original, mean_score[:, :, 0]


def tie_rows(masked, original, tau, h, k):
    """Rows j where key k of head h is its row's threshold element and the row has lost a
    mass float32 cannot resolve against the row's sum (at most 2^-22): whether the key then
    exceeds its own threshold depends on rounding alone."""
    rows = []
    for j in range(k, masked.shape[1]):
        lost = float(original[h, j][masked[h, j]].astype(np.float64).sum())
        if original[h, j, k] == tau[h, j] and 0 < lost <= 2.0 ** -22:
            rows.append((j, lost))
    return rows


def eviction_steps(masked):
    """[H, n]: the step at whose end each key goes (first masking row - 1), or -1."""
    heads, n, _ = masked.shape
    steps = np.full((heads, n), -1, dtype=np.int64)
    for h in range(heads):
        for k in range(n):
            rows = np.nonzero(masked[h, :, k])[0]
            if rows.size:
                steps[h, k] = rows[0] - 1
    return steps


def layer_logits(f, seq, layer):
    group = f[f"seqs/{seq}/layers/{layer}"]
    q = group["q"][...].astype(np.float32)
    k = group["k"][...].astype(np.float32)
    scale = np.float32(f.attrs.get("attn_scale", 1.0 / np.sqrt(q.shape[-1])))
    logits = np.einsum("htd,hsd->hts", q, k).astype(np.float32) * scale
    n = q.shape[1]
    future = np.triu(np.ones((n, n), dtype=bool), 1)
    logits[:, future] = np.finfo(np.float32).min
    return logits


@unittest.skipUnless(os.path.exists(EXE), f"no kvsim program at {EXE} (set KVSIM_EXE)")
class TestBundledTrace(unittest.TestCase):
    def test_eviction_steps_equal_the_authors_loop(self):
        with tempfile.TemporaryDirectory() as tmp:
            survival = os.path.join(tmp, "survival.csv")
            subprocess.run([EXE, "replay", TRACE, "--policy", "scissorhands-official",
                            "--budget", "1", "--survival", survival], check=True, stdout=subprocess.DEVNULL)
            kvsim = {}
            with open(survival, newline="") as f:
                for row in csv.DictReader(f):
                    key = (int(row["seq"]), int(row["layer"]), int(row["group"][2:]), int(row["position"]))
                    kvsim[key] = int(row["eviction_step"])
        pairs = 0
        mismatches, ties = [], []
        with h5py.File(TRACE, "r") as f:
            for seq in sorted(f["seqs"], key=int):
                for layer in sorted(f[f"seqs/{seq}/layers"], key=int):
                    masked, original, tau = authors_masks(layer_logits(f, seq, layer))
                    steps = eviction_steps(masked)
                    for h in range(steps.shape[0]):
                        for k in range(steps.shape[1]):
                            pairs += 1
                            got = kvsim[(int(seq), int(layer), h, k)]
                            if got == steps[h, k]:
                                continue
                            line = f"seq {seq} layer {layer} head {h} position {k}: kvsim {got}, authors' loop {steps[h, k]}"
                            rows = tie_rows(masked, original, tau, h, k)
                            (ties if rows else mismatches).append(
                                line + "".join(f"; tie at row {j} (masked mass {lost:.2g})" for j, lost in rows))
        print(f"{pairs - len(ties) - len(mismatches)} of {pairs} (head, position) pairs equal; {len(ties)} ties:")
        for line in ties + mismatches:
            print("  " + line)
        self.assertEqual(pairs, 8 * 6 * 6 * 256)
        self.assertEqual(mismatches, [])
        self.assertLessEqual(len(ties), 4)


if __name__ == "__main__":
    unittest.main()
