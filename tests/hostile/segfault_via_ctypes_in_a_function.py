# lesson: 1
# expect: segmentation fault
# ---- l01_projections.py
import ctypes


def linear(x, w, b=None):
    return ctypes.string_at(0)  # reads address 0: SIGSEGV


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
