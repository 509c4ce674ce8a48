# lesson: 1
# expect: did not return within 1 s
# ---- l01_projections.py
# Beyond the brief's plain child: this one calls setsid (start_new_session=True), so killing the
# worker's process group does not reach it. A grader must still not leave it running.
# It sleeps 4 s, not 300: long enough to be found right after the check, short enough not to
# be found again by the cases that run after this one (the harness looks for the same marker).
import subprocess
import sys

import numpy as np


def linear(x, w, b=None):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(4)  # HOSTILE-CHILD"],
                     start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        pass


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
