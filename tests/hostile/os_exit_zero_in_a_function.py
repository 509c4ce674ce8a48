# lesson: 1
# expect: ended the Python process (exit code 0)
# expect: os._exit
# ---- l01_projections.py
import os


def linear(x, w, b=None):
    os._exit(0)  # no exception, no cleanup: the process is simply gone with status 0


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
