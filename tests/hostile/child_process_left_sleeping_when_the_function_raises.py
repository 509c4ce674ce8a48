# lesson: 1
# expect: ValueError: not today
# ---- l01_projections.py
import subprocess
import sys

import numpy as np


def linear(x, w, b=None):
    # A child per call, none of them waited for: the worker itself keeps running afterwards.
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "HOSTILE-CHILD"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    raise ValueError("not today")


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
