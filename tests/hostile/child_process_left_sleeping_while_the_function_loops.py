# lesson: 1
# expect: did not return within 1 s
# ---- l01_projections.py
import subprocess
import sys

import numpy as np


def linear(x, w, b=None):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)  # HOSTILE-CHILD"])
    while True:
        pass


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
