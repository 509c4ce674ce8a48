# lesson: 1
# expect: did not return within 1 s
# ---- l01_projections.py
# A process that keeps changing its pid (fork, the parent exits, again) in eight chains for
# 3 s, each chain then sleeping: a sweep that scans /proc for descendants and kills what it
# found sees only pids that are already gone, and a sleeper outlived the check. The harness
# finds every process of the check by its environment: none may be left.
import subprocess
import sys

HOPPER = r'''
import os, sys, time
end = time.monotonic() + 3
while time.monotonic() < end:
    if os.fork() != 0:
        os._exit(0)
time.sleep(10)
'''


def linear(x, w, b=None):
    for _ in range(8):
        subprocess.Popen([sys.executable, "-S", "-c", HOPPER, "HOSTILE-CHILD"],
                         start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        pass


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
