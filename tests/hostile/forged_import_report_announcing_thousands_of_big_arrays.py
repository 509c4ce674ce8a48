# lesson: 1
# expect: too large
# expect: 3,000 arrays announced
# expect: while the file was being imported
# ---- l01_projections.py
import json
import os
import struct
import sys

# The worker's reply pipe is the second descriptor it was started with. Before the worker's own
# import report, this file writes a forged one there: 3000 arrays of 1 MiB announced, and sent.
# The grader must refuse the announcement, not read and hold 3 GB.
RESPONSE_FD = int(sys.argv[2])


def send(data):
    view = memoryview(data)
    while view:
        view = view[os.write(RESPONSE_FD, view) :]


header = {"ok": True, "lesson_modules": ["l01_projections"], "arrays": [["<f8", [2**17]]] * 3000}
body = json.dumps(header).encode()
send(struct.pack(">I", len(body)) + body)
block = bytes(2**20)
for _ in range(3000):
    send(block)


def linear(x, w, b=None):
    return x @ w


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
