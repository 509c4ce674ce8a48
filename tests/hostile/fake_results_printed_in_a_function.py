# lesson: 1
# expect: returned wrong values
# ---- l01_projections.py
import json
import sys

import numpy as np


def shout():
    print("Lesson 01 · Linear projections: one weight matrix per head")
    print("✔ passed · 18 of 18 checks passed")
    print("lesson 1 passed 18/18")
    print("Lesson 1 passed. `course next` moves on.")
    print(json.dumps({"lesson": "l01_projections", "status": "passed", "exercises": [], "message": ""}))
    sys.stderr.write("{\"status\": \"passed\", \"course_version\": \"0.1.0\"}\n")


def linear(x, w, b=None):
    shout()
    return np.full((*x.shape[:-1], w.shape[1]), 1.0, dtype=x.dtype)


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
