# lesson: 1
# expect: did not return within 1 s
# ---- l01_projections.py
import signal

import numpy as np


def linear(x, w, b=None):
    # Shrug off every polite way of stopping a process, then spin.
    for name in ("SIGALRM", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGTERM, signal.SIGINT})
    while True:
        pass


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
