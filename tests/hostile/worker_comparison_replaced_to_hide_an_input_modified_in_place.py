# lesson: 1
# expect: changed its input in place
# ---- l01_projections.py
# Learner code runs in the worker, so it can replace whatever the worker would use to judge its
# inputs: the worker's own comparison (captured at its import), numpy's comparisons, and the
# "mutated" list of every reply. The grader must read the inputs back itself.
import sys

import numpy as np

worker = sys.modules.get("course.engine.sandbox.worker.main")
if worker is not None:
    worker._array_equal = lambda *args, **kwargs: True
    real_call = worker._call

    def _call(*args, **kwargs):
        reply, out = real_call(*args, **kwargs)
        if isinstance(reply, dict):
            reply["mutated"] = []  # "no input changed", whatever happened
        return reply, out

    worker._call = _call
for name in ("array_equal", "array_equiv", "allclose"):
    setattr(np, name, lambda *args, **kwargs: True)


def linear(x, w, b=None):
    out = x @ w
    if b is not None:
        out = out + b
    x[...] = 0  # the caller's input is wiped, and the patches above should hide it
    return out


def head_projections(x, w_heads):
    return np.einsum("btd,hdk->bhtk", x, w_heads)


def fuse_head_weights(w_heads):
    H, D, K = w_heads.shape
    return np.transpose(w_heads, (1, 0, 2)).reshape(D, H * K)
