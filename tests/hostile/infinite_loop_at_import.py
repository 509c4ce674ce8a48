# lesson: 1
# expect: took longer than 2 s
# expect: top level
# expect: line 3
# ---- l01_projections.py
import numpy as np

while True: pass  # never finishes importing (one line: every instruction of the loop is line 3)


def linear(x, w, b=None):
    raise NotImplementedError


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
