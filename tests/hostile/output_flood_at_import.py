# lesson: 1
# expect: printed more than 8 MiB
# expect: print inside a loop
# ---- l01_projections.py
import sys

import numpy as np

for i in range(200_000):  # about 200 MB of output, on both streams
    print(f"{i:08d} " + "spam " * 200)
    sys.stderr.write("eggs " * 200 + "\n")


def linear(x, w, b=None):
    raise NotImplementedError


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
