"""What the grader checks of each call itself, never taking the worker's word for it.

Learner code runs in the worker, so it can write anything into a reply or the worker's memory.
Before anything of a reply is used, the grader checks it here: the reply's fields and its error
description (``check_reply``), the shape trace meant for the pictures (``checked_trace``), and the
call's input arrays, read back from the file the grader shares with the worker (``SharedInputs``).
A reply it refuses becomes one sentence the learner can act on (``malformed_reply``).
``LAST_REPLY`` parses replies, sparing the grader the same header parsed again call after call.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from course.engine.wire import messages


class SharedInputs:
    """A call's input arrays in a file the worker maps (``messages.shared_views``), so that the
    grader itself sees what the learner's code did to them.

    The file is the worker's ``inputs``: a memfd the grader made before starting the worker
    (it has no name anywhere, so learner code cannot put anything in its place), inherited by
    the worker. The grader writes each call's arrays there, and after the reply reads them
    back through its own descriptor and compares them with its own copy. What the worker says
    about its inputs is never asked: learner code can forge it.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._sent: list[tuple[bytes, int, np.dtype]] = []
        self._size = 0  # the file's size after the last ``write``

    def write(self, arrays: list[np.ndarray]) -> dict:
        """Put ``arrays`` in the file; returns their layout for the call's header."""
        specs, size = messages.shared_layout(arrays)
        current = os.fstat(self.fd).st_size
        if current < size:  # grown ahead, so that the worker seldom maps the file anew
            os.ftruncate(self.fd, max(size, 2 * current, 1 << 16))
        self._sent = []
        for array, (_, _, offset) in zip(arrays, specs, strict=True):
            raw = array.tobytes()  # C order, as the worker's view reads it
            if os.pwrite(self.fd, raw, offset) != len(raw):
                raise OSError("short write to the inputs file")
            self._sent.append((raw, offset, array.dtype))
        self._size = os.fstat(self.fd).st_size
        return {"size": size, "arrays": specs}

    def as_written(self, before: bytes) -> bytes:
        """The file's contents had the grader alone written to it since it held ``before``:
        grown with zeros as ``write`` grows it, the last call's arrays in their places."""
        contents = bytearray(before)
        contents.extend(bytes(max(0, self._size - len(contents))))
        for raw, offset, _ in self._sent:
            contents[offset : offset + len(raw)] = raw
        return bytes(contents)

    def changed(self) -> list[int]:
        """Which arrays of the last ``write`` are not what the grader wrote (read now)."""
        changed = []
        for index, (raw, offset, dtype) in enumerate(self._sent):
            now = os.pread(self.fd, len(raw), offset)  # shorter if the file was truncated
            if now == raw:
                continue
            if len(now) == len(raw) and dtype.kind in "fc":  # -0.0 for 0.0, another NaN: equal
                if np.array_equal(np.frombuffer(now, dtype), np.frombuffer(raw, dtype), equal_nan=True):
                    continue
            changed.append(index)
        return changed


def _reply_to_keep(raw: bytes, reply: Any) -> bool:
    """A successful reply of at most 64 KiB: ``LearnerModule.call`` only reads it (its result
    and trace become new objects). A reply that is not ok is parsed afresh every time, since
    its error description lives on in the exception raised."""
    return len(raw) <= 1 << 16 and isinstance(reply, dict) and reply.get("ok") is True


LAST_REPLY = messages.LastParsed(keep=_reply_to_keep)

TRACE_CALLS, TRACE_SHAPES, SHAPE_DIMS, NAME_LENGTH = 1000, 64, 32, 200


def _checked_shapes(value: Any) -> list | None:
    """A list of shapes (each None or a list of non-negative ints), or None if it is not one."""
    if not isinstance(value, list) or len(value) > TRACE_SHAPES:
        return None
    for shape in value:
        if shape is not None and not (
            isinstance(shape, list)
            and len(shape) <= SHAPE_DIMS
            and all(type(n) is int and 0 <= n < 2**31 for n in shape)
        ):
            return None
    return [None if shape is None else list(shape) for shape in value]


def checked_trace(recorded: Any) -> list[dict]:
    """A shape trace from the worker as data the pictures can use: at most ``TRACE_CALLS``
    calls ``{"function": name, "args": shapes, "result": shapes}`` ("args" and "result" may be
    missing: no result means the call raised). Learner code can write anything there, so
    anything else makes the whole trace empty (no picture), never an error of ours."""
    if not isinstance(recorded, list) or len(recorded) > TRACE_CALLS:
        return []
    calls = []
    for entry in recorded:
        if not isinstance(entry, dict):
            return []
        name = entry.get("function")
        if not isinstance(name, str) or not 0 < len(name) <= NAME_LENGTH:
            return []
        call: dict[str, Any] = {"function": name}
        for key in ("args", "result"):
            if key in entry:
                shapes = _checked_shapes(entry[key])
                if shapes is None:
                    return []
                call[key] = shapes
        calls.append(call)
    return calls


def malformed_reply(problem: messages.ProtocolError) -> str:
    """What a learner can do about a reply the grader refused (the worker's side, where their
    code runs, wrote it): the grader reads and holds only bounded, well-formed replies."""
    if isinstance(problem, messages.TooLarge):
        return (
            f"The reply from your code to the grader was too large ({problem}). Return an array "
            "of the shape the exercise asks for, and remove anything in your files that changes "
            "the course's own modules (course.engine) or writes to the grader's pipes."
        )
    return (
        f"The reply from your code to the grader was malformed ({problem}). Replies are written "
        "by the course's own code, which runs beside yours, so something in your files changed "
        "how: remove anything that changes the course's own modules (course.engine) or writes "
        "to the grader's pipes."
    )


def _check_error(info: Any) -> dict:
    """``info`` if it is an error description as the worker writes it, else ProtocolError."""

    def text(value: Any, limit: int, optional: bool = False) -> bool:
        return (optional and value is None) or (isinstance(value, str) and len(value) <= limit)

    def number(value: Any) -> bool:
        return value is None or isinstance(value, int)

    if not isinstance(info, dict):
        raise messages.ProtocolError("an error that is not an object")
    frames, syntax = info.get("frames", []), info.get("syntax")
    if not (
        text(info.get("type", ""), 200)
        and text(info.get("message", ""), 20_000, optional=True)
        and text(info.get("signature", ""), 2000)
        and text(info.get("origin"), 200, optional=True)
        and isinstance(frames, list)
        and len(frames) <= 10_000
        and (info.get("origin") is None or frames)
    ):
        raise messages.ProtocolError("an error of the wrong shape")
    for frame in frames:
        if not (
            isinstance(frame, dict)
            and text(frame.get("file"), 1000)
            and number(frame.get("line"))
            and text(frame.get("function"), 1000)
            and text(frame.get("code"), 1000, optional=True)
        ):
            raise messages.ProtocolError("an error frame of the wrong shape")
    if syntax is not None and not (
        isinstance(syntax, dict)
        and text(syntax.get("file"), 1000)
        and number(syntax.get("line"))
        and number(syntax.get("offset"))
        and text(syntax.get("text"), 1000, optional=True)
    ):
        raise messages.ProtocolError("a syntax error of the wrong shape")
    return info


def check_reply(reply: dict, report: bool = False) -> dict:
    """``reply`` (a call's, or the import ``report``) if its fields have the types the grader
    reads, else ProtocolError. The result, the trace and ``mutated`` are checked where used."""
    ok = reply.get("ok")
    if not isinstance(ok, bool):
        raise messages.ProtocolError("no ok field")
    if not ok:
        _check_error(reply.get("error"))
    modules = reply.get("lesson_modules", [])
    if report and not (
        isinstance(modules, list)
        and len(modules) <= 1000
        and all(isinstance(name, str) and len(name) <= 200 for name in modules)
    ):
        raise messages.ProtocolError("a list of lesson modules of the wrong shape")
    return reply
