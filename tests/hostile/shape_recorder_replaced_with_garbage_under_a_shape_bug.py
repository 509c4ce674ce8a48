# lesson: 6
# expect: operands could not be broadcast
# ---- l06_multi_head.py
<solution>
# ---- l05_heads.py
# Lesson 6 imports this lesson 5 file: its split_heads forgets the swap (a shape bug, so the check
# fails and the screen draws the shape trace), and at import it replaces the worker's shape
# recorder with one that fills the trace with what no recorder writes: unhashable shapes, deep
# nesting, wrong types, huge names, too many calls. The trace is data for a picture: the grader
# must drop it, never crash on it, and never take it as a result.
import sys

import numpy as np

nested = [3]
for _ in range(60):
    nested = [nested]
GARBAGE = [
    {"function": "linear", "args": [], "result": [[[7], 3, 24]]},  # a shape holding a list
    {"function": "split_heads", "args": [nested], "result": [[7, 4, 3, 6]]},
    {"function": ["linear"], "args": [], "result": [[7, 3, 24]]},  # an unhashable name
    {"function": "x" * 100_000, "args": [], "result": [[1]]},
    {"function": "merge_heads", "args": "not a list", "result": {"shape": [7, 3, 24]}},
    {"function": "linear", "args": [], "result": [[-1, 2**70, 1.5, True, "3"]]},
    "not a call",
    None,
    [["linear"]],
] + [{"function": "linear", "args": [], "result": [[7, 3, 24]]}] * 3000

worker = sys.modules.get("course.engine.sandbox.worker.main")
if worker is not None:

    def record_lesson_calls(module, source_dir, trace):
        trace.extend(GARBAGE)
        return []

    worker.record_lesson_calls = record_lesson_calls


def split_heads(x, n_heads):
    B, T, D = x.shape
    if D % n_heads != 0:
        raise ValueError(f"D = {D} is not divisible by H = {n_heads}")
    return x.reshape(B, T, n_heads, D // n_heads)  # the swap is missing: (B, T, H, K)


def merge_heads(x):
    B, H, T, K = x.shape
    return np.swapaxes(x, 1, 2).reshape(B, T, H * K)
