#!/usr/bin/python3
"""Adds the RoPE root attributes (docs/traces.md) to the bundled trace, which predates them.

data/traces/stories15M-8x256.h5 was captured from llama2.c's stories15M before `kvsim
capture` wrote them. Its model's RoPE is known: trace/model/llama2.cpp rotates dims (2i, 2i+1)
of each head by pos / 10000^(2i / head_dim) (the table after "RoPE table", `rope()`), which
llama2_rope() declares: theta 10000, scaling none, factor 1, rotary_dims = head_dim,
pairing interleaved. This writes only those five attributes, with the types kvsim's writer
uses (float64, variable-length UTF-8 strings, int64); no dataset is touched. Run again, it
changes nothing; a file holding other values is refused.

Usage: /usr/bin/python3 scripts/add-rope-attrs.py [TRACE.h5]
(default data/traces/stories15M-8x256.h5; then update its sha256 in data/README.md)
"""
import pathlib
import sys

import h5py
import numpy as np

root = pathlib.Path(__file__).resolve().parent.parent
path = sys.argv[1] if len(sys.argv) > 1 else root / "data/traces/stories15M-8x256.h5"
with h5py.File(path, "r+") as f:
    if f.attrs.get("model") != "stories15M" or f.attrs.get("source") != "capture":
        sys.exit(f"{path}: not a kvsim capture of stories15M")
    head_dim = int(f.attrs["head_dim"])
    wanted = {
        "rope_theta": np.float64(10000.0),
        "rope_scaling_type": "none",
        "rope_scaling_factor": np.float64(1.0),
        "rotary_dims": np.int64(head_dim),
        "rope_pairing": "interleaved",
    }
    for name, value in wanted.items():
        if name in f.attrs:
            if f.attrs[name] != value:
                sys.exit(f"{path}: attribute {name} is {f.attrs[name]!r}, not {value!r}")
            continue
        f.attrs[name] = value
print(f"{path}: theta=10000 scaling=none factor=1 rotary_dims={head_dim} pairing=interleaved")
