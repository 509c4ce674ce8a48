"""The wire format between the grader and the worker that runs learner code.

A message is a JSON header, which describes each array by dtype and shape, followed by the
arrays' raw bytes. Pickle is never used in either direction, so a learner's objects cannot run
code in the grader, and only numeric dtypes are accepted. Values are encoded as tagged JSON:

    {"a": i}                  the i-th array that follows the header
    {"v": x}                  a JSON scalar (None, bool, int, float, str)
    {"t": [...]}/{"l": [...]} a tuple / list of values
    {"d": {key: value}}       a dict with string keys
    {"o": type, "r": repr}    anything else, described but not transferred (worker -> grader only)

Values are tagged and read back in ``values``, arrays described by the other side are checked in
``checks`` (with the errors every reader raises); their names are re-exported here.
This module holds the messages (``pack`` / ``unpack`` and their bounds) and the shared inputs'
layout. Imports only the standard library and numpy: the worker loads it before any learner code.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from course.engine.wire.checks import ProtocolError as ProtocolError
from course.engine.wire.checks import TooLarge, array_spec, checked_array, mib
from course.engine.wire.values import Opaque as Opaque
from course.engine.wire.values import decode as decode
from course.engine.wire.values import encode as encode

# Taken once, at import: learner code in the worker may later replace numpy's attributes.
_asarray, _frombuffer = np.asarray, np.frombuffer

MAX_HEADER = 16 * 1024 * 1024
MAX_ARRAYS = 10_000

# What the grader reads of one reply from the worker, whose side anything may forge: a check's
# inputs and results are kilobytes, so these are generous, and a reply announcing more is refused
# before any of it is read (the worker's memory limit does not cover the grader's process).
REPLY_HEADER = 4 * 1024 * 1024
REPLY_BYTES = 64 * 1024 * 1024  # the header and all the arrays of one reply
REPLY_ARRAYS = 4096


def pack(header: dict, arrays: list[np.ndarray]) -> bytes:
    """One message: header length, header JSON (with each array's dtype and shape), then each
    array's raw C-order bytes: as plain and as safe as numpy's .npy format, whose header would
    be parsed with ``ast`` on every call."""
    contiguous = [_asarray(array, order="C") for array in arrays]
    specs = [[a.dtype.str, list(a.shape)] for a in contiguous]
    body = json.dumps(dict(header, arrays=specs)).encode()
    parts = [struct.pack(">I", len(body)), body]
    for array in contiguous:
        parts.append(array.tobytes())
    return b"".join(parts)


def read_exact(fd: int, size: int) -> bytes:
    chunks = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class LastParsed:
    """``json.loads`` that remembers the last header it parsed, for ``unpack``: a check's calls
    to one function with arrays of the same shapes (their values travel in the inputs file)
    send the same request header, and often get the same reply header, byte for byte, which
    is then not parsed again. What it returns must only be read.
    ``keep(raw, parsed)``: whether a header may be remembered (default: every one)."""

    def __init__(self, keep: Callable[[bytes, Any], bool] | None = None) -> None:
        self.keep = keep
        self.last: tuple[bytes, Any] | None = None  # replaced whole: safe to share by threads

    def __call__(self, raw: bytes) -> Any:
        last = self.last
        if last is not None and last[0] == raw:
            return last[1]
        value = json.loads(raw)
        if self.keep is None or self.keep(raw, value):
            self.last = (raw, value)
        return value


def unpack(
    read: Callable[[int], bytes],
    max_header: int = MAX_HEADER,
    max_bytes: int | None = None,
    max_arrays: int = MAX_ARRAYS,
    loads: Callable[[bytes], Any] = json.loads,
) -> tuple[dict, list[np.ndarray]]:
    """Read one message with ``read(n)``; a short read is the end of the stream (EOFError).

    A message whose header is over ``max_header`` bytes, that announces more than ``max_arrays``
    arrays or more than ``max_bytes`` bytes in all, or that is not what it should be, raises
    ProtocolError (TooLarge for the sizes) before anything more of it is read. ``loads`` parses
    the header's JSON; it may return one object for the same bytes again, which is not changed."""

    def take(n: int) -> bytes:
        data = read(n)
        if len(data) != n:
            raise EOFError
        return data

    (size,) = struct.unpack(">I", take(4))
    if size > max_header:
        raise TooLarge(f"a header of {mib(size)} announced, at most {mib(max_header)} allowed")
    try:
        header = loads(take(size))
    except RecursionError as exc:  # json nests with the C stack: a forged header can be deep
        raise ProtocolError("header nested too deeply") from exc
    except ValueError as exc:
        raise ProtocolError("header is not JSON") from exc
    if not isinstance(header, dict) or not isinstance(header.get("arrays", []), list):
        raise ProtocolError("header is not an object")
    header = dict(header)  # its top level, without the arrays' descriptions
    announced = header.pop("arrays", [])
    if len(announced) > max_arrays:
        raise TooLarge(f"{len(announced):,} arrays announced, at most {max_arrays:,} allowed")
    specs = [array_spec(spec) for spec in announced]
    total = 4 + size + sum(nbytes for _, _, nbytes in specs)
    if max_bytes is not None and total > max_bytes:
        raise TooLarge(f"{mib(total)} announced, at most {mib(max_bytes)} allowed")
    arrays = []
    for dtype, shape, nbytes in specs:
        # bytearray: the arrays are writable, as the caller's own arrays would be
        arrays.append(_frombuffer(bytearray(take(nbytes)), dtype=dtype).reshape(shape))
    return header, arrays


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


# -- a call's input arrays in a file both sides map ---------------------------------------------
# The grader writes a call's input arrays into a file it created and keeps open; the worker maps
# the file and hands the learner views of it, so an input changed in place is changed in the
# file, where the grader reads it back through its own descriptor after the reply.
SHARED_ALIGN = 64


def shared_layout(arrays: list[np.ndarray]) -> tuple[list[list], int]:
    """Where each array goes in the shared file, as ``[dtype, shape, offset]`` each (offsets
    aligned for any dtype), and the bytes the file must hold."""
    specs, offset = [], 0
    for array in arrays:
        specs.append([array.dtype.str, list(array.shape), offset])
        offset += -(-array.nbytes // SHARED_ALIGN) * SHARED_ALIGN
    return specs, offset


def shared_views(buffer: Any, specs: Any) -> list[np.ndarray]:
    """The arrays of a ``shared_layout`` as writable C-contiguous views of ``buffer`` (a
    writable mapping of the shared file); raises ProtocolError on a malformed layout."""
    if not isinstance(specs, list):
        raise ProtocolError("bad shared layout")
    arrays = []
    for spec in specs[:10_000]:
        if not (isinstance(spec, list) and len(spec) == 3 and type(spec[2]) is int and spec[2] >= 0):
            raise ProtocolError("bad shared array description")
        dtype, shape, nbytes = checked_array(spec[0], spec[1])
        if spec[2] + nbytes > len(buffer):
            raise ProtocolError("shared array outside the file")
        count = nbytes // dtype.itemsize
        arrays.append(_frombuffer(buffer, dtype=dtype, count=count, offset=spec[2]).reshape(shape))
    return arrays
