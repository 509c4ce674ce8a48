# lesson: 1
# expect: the reply from your code to the grader was malformed
# expect: nested too deeply
# ---- l01_projections.py
import os
import struct
import sys

import numpy as np

# Each function writes a forged reply to the worker's reply pipe (its second descriptor) before
# the worker's own: a JSON header nested 200,000 levels deep, which json.loads refuses with a
# RecursionError. That is the learner's error, never "the grader itself hit a problem".
RESPONSE_FD = int(sys.argv[2])
DEEP = b"[" * 200_000 + b"]" * 200_000


def forge():
    data = memoryview(struct.pack(">I", len(DEEP)) + DEEP)
    while data:
        data = data[os.write(RESPONSE_FD, data) :]


def linear(x, w, b=None):
    forge()
    return x @ w if b is None else x @ w + b


def head_projections(x, w_heads):
    forge()
    return np.einsum("btd,hdk->bhtk", x, w_heads)


def fuse_head_weights(w_heads):
    forge()
    return np.concatenate(list(w_heads), axis=1)
