# lesson: 1
# expect: the reply from your code to the grader was malformed
# expect: header is not JSON
# expect: an error of the wrong shape
# expect: bad array index
# expect: the reply from your code to the grader was too large
# ---- l01_projections.py
import json
import os
import struct
import sys
import zlib

# Each call writes a forged reply to the worker's reply pipe (its second descriptor) before the
# worker's own, a different kind of malformed one for different inputs: picked by a checksum of
# the call's first array, salted so that the calls of lesson 1 meet all 13 kinds (a worker keeps
# nothing between the fresh workers of a check, and the grading tests' inputs are the same on
# every run). Every one of them is the learner's error, with a message, never "the grader
# itself hit a problem".
RESPONSE_FD = int(sys.argv[2])


def message(header, payload=b""):
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack(">I", len(body)) + body + payload


NOT_STARTED = {"type": "NotImplementedError", "message": "", "frames": [], "origin": "l00_nothing"}
FORGED = [
    message(b"{not json"),
    message(b"[1, 2, 3]"),
    message({"ok": "yes", "result": {"v": 1}}),
    message({"ok": False, "error": {"type": "ValueError", "message": "m", "frames": "zzz"}}),
    message({"ok": False, "error": NOT_STARTED}),
    message({"ok": False, "error": {"type": "SyntaxError", "frames": [], "syntax": {"file": 1}}}),
    message({"ok": True, "result": {"zz": 1}}),
    message({"ok": True, "result": {"v": {"nested": [1, 2]}}}),
    message({"ok": True, "result": {"a": 5}, "arrays": [["<f8", [2]]]}, bytes(16)),
    message({"ok": True, "result": {"a": 0, "scalar": True}, "arrays": [["<f8", [2]]]}, bytes(16)),
    message({"ok": True, "result": {"a": 0}, "arrays": [["<f8", [1e999]]]}),
    message({"ok": True, "result": {"a": 0}, "arrays": [["<M8[s]", [1]]]}, bytes(8)),
    message({"ok": True, "result": {"a": 0}, "arrays": [["<f8", [2**17]]] * 100}),
]


def forge(first):
    count = zlib.crc32(bytes([159]) + repr(first.shape).encode() + first.tobytes()[:256])
    data = memoryview(FORGED[count % len(FORGED)])
    while data:
        data = data[os.write(RESPONSE_FD, data) :]


def linear(x, w, b=None):
    forge(x)
    return x @ w if b is None else x @ w + b


def head_projections(x, w_heads):
    forge(x)
    raise NotImplementedError


def fuse_head_weights(w_heads):
    forge(w_heads)
    raise NotImplementedError
