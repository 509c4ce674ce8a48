# lesson: 1
# expect: may write no file
# ---- l01_projections.py
# A worker once wrote 1.5 GB into its scratch folder in one 5-second call (on a RAM-backed /tmp,
# that is memory). Each file stopped at the 8 MiB print limit, but nothing bounded how many
# files. Here: 8 MiB files until 256 MiB or the first refusal. The worker now writes no file at
# all, only through the two descriptors the grader gave it, whose sizes are bounded.
import os

import numpy as np

CHUNK = b"x" * (1 << 20)


def linear(x, w, b=None):
    for index in range(32):
        with open(f"ballast-{index}.bin", "wb") as handle:
            for _ in range(8):
                handle.write(CHUNK)
    out = x @ w
    return out if b is None else out + b


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
