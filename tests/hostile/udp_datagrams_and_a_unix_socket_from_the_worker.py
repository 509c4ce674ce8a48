# lesson: 1
# expect: Operation not permitted
# ---- l01_projections.py
# From the worker, learner code connected to the warm grader's Unix socket (and could stop it)
# and sent UDP datagrams out: Landlock's network rules cover TCP only. The worker may create no
# socket of any family (a seccomp filter), so it talks to the grader through its pipes only.
import socket

import numpy as np


def linear(x, w, b=None):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.sendto(b"graded: passed", ("127.0.0.1", 9))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
        try:
            unix.connect("/nonexistent/grader.sock")
        except FileNotFoundError:
            pass
    out = x @ w
    return out if b is None else out + b


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
