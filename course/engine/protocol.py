"""The wire format between the grader and the worker that runs learner code.

A message is a JSON header followed by zero or more arrays in numpy's own ``.npy`` format, each
framed by its length. Pickle is never used in either direction, so a learner's objects cannot run
code in the grader. Values are encoded as tagged JSON:

    {"a": i}                  the i-th array that follows the header
    {"v": x}                  a JSON scalar (None, bool, int, float, str)
    {"t": [...]}/{"l": [...]} a tuple / list of values
    {"d": {key: value}}       a dict with string keys
    {"o": type, "r": repr}    anything else, described but not transferred (worker -> grader only)

Imports only the standard library and numpy: the worker loads it before any learner code.
"""

from __future__ import annotations

import io
import json
import os
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

MAX_HEADER = 16 * 1024 * 1024
MAX_ARRAY = 512 * 1024 * 1024
MAX_ITEMS = 64
MAX_DEPTH = 4


class ProtocolError(Exception):
    """The other side sent something that is not a valid message."""


class Opaque:
    """A value the worker could not send as data: we only know its type and a short repr."""

    def __init__(self, type_name: str, text: str) -> None:
        self.type_name = type_name
        self.text = text

    def __repr__(self) -> str:
        return f"<{self.type_name}: {self.text}>"


def encode(value: Any, arrays: list[np.ndarray], depth: int = 0,
           labels: list[str] | None = None, path: str = "value") -> Any:
    """Tag ``value`` for JSON, appending any arrays it holds to ``arrays``.

    When ``labels`` is given, each array's place in ``value`` (``path``, ``path[1]``,
    ``path['w_q']``) is appended to it, so the grader can name an argument precisely.
    """
    def add(array: np.ndarray) -> int:
        arrays.append(array)
        if labels is not None:
            labels.append(path)
        return len(arrays) - 1

    if isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
        return {"a": add(value)}
    if isinstance(value, np.generic) and value.dtype.kind in "biufc":
        return {"a": add(np.asarray(value)), "scalar": True}
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, str) and len(value) > 10_000:
            return {"o": "str", "r": value[:200]}
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**62:
            return {"o": "int", "r": str(value)[:200]}
        return {"v": value}
    if depth < MAX_DEPTH and isinstance(value, (tuple, list)) and len(value) <= MAX_ITEMS:
        tag = "t" if isinstance(value, tuple) else "l"
        return {tag: [encode(item, arrays, depth + 1, labels, f"{path}[{i}]")
                      for i, item in enumerate(value)]}
    if (
        depth < MAX_DEPTH
        and isinstance(value, dict)
        and len(value) <= MAX_ITEMS
        and all(isinstance(key, str) for key in value)
    ):
        return {"d": {key: encode(item, arrays, depth + 1, labels, f"{path}[{key!r}]")
                      for key, item in value.items()}}
    return describe(value)


def describe(value: Any) -> dict:
    """An opaque stand-in for a value that cannot travel; repr failures are tolerated."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a learner's __repr__ may raise anything
        text = "<repr failed>"
    return {"o": type(value).__name__[:100], "r": text[:200]}


def decode(tagged: Any, arrays: list[np.ndarray], depth: int = 0) -> Any:
    """Inverse of ``encode``; raises ProtocolError on anything malformed."""
    if not isinstance(tagged, dict) or len(tagged) == 0 or depth > MAX_DEPTH + 1:
        raise ProtocolError("malformed value")
    if "a" in tagged:
        index = tagged["a"]
        if not isinstance(index, int) or not 0 <= index < len(arrays):
            raise ProtocolError("bad array index")
        array = arrays[index]
        return array[()] if tagged.get("scalar") else array
    if "v" in tagged:
        return tagged["v"]
    if "t" in tagged or "l" in tagged:
        items = tagged.get("t", tagged.get("l"))
        if not isinstance(items, list):
            raise ProtocolError("malformed sequence")
        decoded = [decode(item, arrays, depth + 1) for item in items]
        return tuple(decoded) if "t" in tagged else decoded
    if "d" in tagged:
        if not isinstance(tagged["d"], dict):
            raise ProtocolError("malformed dict")
        return {str(k): decode(v, arrays, depth + 1) for k, v in tagged["d"].items()}
    if "o" in tagged:
        return Opaque(str(tagged["o"])[:100], str(tagged.get("r", ""))[:200])
    raise ProtocolError("unknown tag")


def _array_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    # np.ascontiguousarray would turn a 0-d array into shape (1,): keep the shape exactly.
    np.lib.format.write_array(buffer, np.asarray(array, order="C"), allow_pickle=False)
    return buffer.getvalue()


def pack(header: dict, arrays: list[np.ndarray]) -> bytes:
    """One message: header length, header JSON, then each array's length and .npy bytes."""
    body = json.dumps(dict(header, n_arrays=len(arrays))).encode()
    parts = [struct.pack(">I", len(body)), body]
    for array in arrays:
        blob = _array_bytes(array)
        parts += [struct.pack(">Q", len(blob)), blob]
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


def unpack(read: Callable[[int], bytes]) -> tuple[dict, list[np.ndarray]]:
    """Read one message with ``read(n)``, which returns exactly n bytes or raises EOFError."""
    (size,) = struct.unpack(">I", read(4))
    if size > MAX_HEADER:
        raise ProtocolError("header too large")
    try:
        header = json.loads(read(size))
    except ValueError as exc:
        raise ProtocolError("header is not JSON") from exc
    if not isinstance(header, dict):
        raise ProtocolError("header is not an object")
    count = header.get("n_arrays", 0)
    if not isinstance(count, int) or not 0 <= count <= 10_000:
        raise ProtocolError("bad array count")
    arrays = []
    for _ in range(count):
        (length,) = struct.unpack(">Q", read(8))
        if length > MAX_ARRAY:
            raise ProtocolError("array too large")
        try:
            arrays.append(np.lib.format.read_array(io.BytesIO(read(length)),
                                                   allow_pickle=False))
        except (ValueError, OSError) as exc:
            raise ProtocolError("array is not valid .npy data") from exc
    return header, arrays


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
