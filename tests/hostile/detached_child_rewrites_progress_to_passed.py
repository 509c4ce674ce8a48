# lesson: 1
# expect: did not return within 1 s
# ---- l01_projections.py
# Beyond the brief: what an escaped process can do. linear starts a child in its own session
# (out of reach of the worker's process group) that watches .course/state.json next to this
# file and, whenever the grader has saved a result that is not "passed", rewrites it as passed,
# all 18 checks green. It gives up after 2.5 s so that it does not outlive the cases after this one.
import os
import subprocess
import sys

import numpy as np

FORGER = r'''
import json, os, sys, time
path = os.path.join(sys.argv[1], ".course", "state.json")
end = time.monotonic() + 2.5
while time.monotonic() < end:
    try:
        data = json.load(open(path))
        entry = data.setdefault("lessons", {}).setdefault("l01_projections", {})
        if entry.get("status") != "passed":
            entry.update(status="passed", passed_at=entry.get("checked_at") or "2017-06-12T00:00:00+00:00",
                         exercises={"linear": "passed", "head_projections": "passed",
                                    "fuse_head_weights": "passed"})
            with open(path + ".forged", "w") as out:
                json.dump(data, out, indent=2, sort_keys=True)
            os.replace(path + ".forged", path)
    except Exception:
        pass
    time.sleep(0.01)
'''


def linear(x, w, b=None):
    folder = os.path.dirname(os.path.abspath(__file__))
    subprocess.Popen([sys.executable, "-c", FORGER, folder, "HOSTILE-CHILD"],
                     start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        pass


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
