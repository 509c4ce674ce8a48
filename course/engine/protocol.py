"""The wire format between the grader and the worker that runs learner code.

A message is a JSON header, which describes each array by dtype and shape, followed by the
arrays' raw bytes. Pickle is never used in either direction, so a learner's objects cannot run
code in the grader, and only numeric dtypes are accepted. Values are encoded as tagged JSON:

    {"a": i}                  the i-th array that follows the header
    {"v": x}                  a JSON scalar (None, bool, int, float, str)
    {"t": [...]}/{"l": [...]} a tuple / list of values
    {"d": {key: value}}       a dict with string keys
    {"o": type, "r": repr}    anything else, described but not transferred (worker -> grader only)

Imports only the standard library and numpy: the worker loads it before any learner code.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

# Taken once, at import: learner code in the worker may later replace numpy's attributes.
_ndarray, _generic, _asarray, _frombuffer, _dtype, _prod, _int64 = (
    np.ndarray,
    np.generic,
    np.asarray,
    np.frombuffer,
    np.dtype,
    np.prod,
    np.int64,
)
_product = math.prod

MAX_HEADER = 16 * 1024 * 1024
MAX_ARRAY = 512 * 1024 * 1024
MAX_ITEMS = 64
MAX_DEPTH = 4
MAX_ARRAYS = 10_000

# What the grader reads of one reply from the worker, whose side anything may forge: a check's
# inputs and results are kilobytes, so these are generous, and a reply announcing more is refused
# before any of it is read (the worker's memory limit does not cover the grader's process).
REPLY_HEADER = 4 * 1024 * 1024
REPLY_BYTES = 64 * 1024 * 1024  # the header and all the arrays of one reply
REPLY_ARRAYS = 4096


class ProtocolError(Exception):
    """The other side sent something that is not a valid message."""


class TooLarge(ProtocolError):
    """The other side announced a message larger than the reader accepts."""


class Opaque:
    """A value the worker could not send as data: we only know its type and a short repr."""

    def __init__(self, type_name: str, text: str) -> None:
        self.type_name = type_name
        self.text = text

    def __repr__(self) -> str:
        return f"<{self.type_name}: {self.text}>"


def encode(
    value: Any, arrays: list[np.ndarray], depth: int = 0, labels: list[str] | None = None, path: str = "value"
) -> Any:
    """Tag ``value`` for JSON, appending any arrays it holds to ``arrays``.

    When ``labels`` is given, each array's place in ``value`` (``path``, ``path[1]``,
    ``path['w_q']``) is appended to it, so the grader can name an argument precisely."""
    if isinstance(value, _ndarray) and value.dtype.kind in "biufc":
        arrays.append(value)
        if labels is not None:
            labels.append(path)
        return {"a": len(arrays) - 1}
    if isinstance(value, _generic) and value.dtype.kind in "biufc":
        arrays.append(_asarray(value))
        if labels is not None:
            labels.append(path)
        return {"a": len(arrays) - 1, "scalar": True}
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, str) and len(value) > 10_000:
            return {"o": "str", "r": value[:200]}
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**62:
            return {"o": "int", "r": str(value)[:200]}
        return {"v": value}
    if depth < MAX_DEPTH and isinstance(value, (tuple, list)) and len(value) <= MAX_ITEMS:
        tag = "t" if isinstance(value, tuple) else "l"
        if labels is None:  # no places to name: no paths to build (a result's encoding)
            return {tag: [encode(item, arrays, depth + 1) for item in value]}
        return {
            tag: [encode(item, arrays, depth + 1, labels, f"{path}[{i}]") for i, item in enumerate(value)]
        }
    if (
        depth < MAX_DEPTH
        and isinstance(value, dict)
        and len(value) <= MAX_ITEMS
        and all(isinstance(key, str) for key in value)
    ):
        if labels is None:
            return {"d": {key: encode(item, arrays, depth + 1) for key, item in value.items()}}
        return {
            "d": {
                key: encode(item, arrays, depth + 1, labels, f"{path}[{key!r}]")
                for key, item in value.items()
            }
        }
    return describe(value)


def describe(value: Any) -> dict:
    """An opaque stand-in for a value that cannot travel; repr failures are tolerated."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a learner's __repr__ may raise anything
        text = "<repr failed>"
    return {"o": type(value).__name__[:100], "r": text[:200]}


# The sets of keys a tagged value may have: one tag alone, or one of the two pairs.
_SINGLE_TAGS, _PAIRED_TAGS = frozenset(("a", "v", "t", "l", "d", "o")), ({"a", "scalar"}, {"o", "r"})


def decode(tagged: Any, arrays: list[np.ndarray], depth: int = 0) -> Any:
    """Inverse of ``encode``; raises ProtocolError on anything malformed (an unknown tag, a value
    of the wrong type, too many items, too deep, an array index that is not there)."""
    if not isinstance(tagged, dict) or depth > MAX_DEPTH + 1:
        raise ProtocolError("malformed value")
    if not (next(iter(tagged)) in _SINGLE_TAGS if len(tagged) == 1 else tagged.keys() in _PAIRED_TAGS):
        raise ProtocolError("malformed value")
    if "a" in tagged:
        index = tagged["a"]
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(arrays):
            raise ProtocolError("bad array index")
        array = arrays[index]
        scalar = tagged.get("scalar", False)
        if not isinstance(scalar, bool) or (scalar and array.ndim != 0):
            raise ProtocolError("malformed scalar")
        return array[()] if scalar else array
    if "v" in tagged:
        value = tagged["v"]
        if not (value is None or isinstance(value, (bool, int, float, str))):
            raise ProtocolError("malformed plain value")
        if isinstance(value, str) and len(value) > 10_000:
            raise ProtocolError("string too long")
        return value
    if "t" in tagged or "l" in tagged:
        items = tagged.get("t", tagged.get("l"))
        if not isinstance(items, list) or len(items) > MAX_ITEMS:
            raise ProtocolError("malformed sequence")
        decoded = [decode(item, arrays, depth + 1) for item in items]
        return tuple(decoded) if "t" in tagged else decoded
    if "d" in tagged:
        if not isinstance(tagged["d"], dict) or len(tagged["d"]) > MAX_ITEMS:
            raise ProtocolError("malformed dict")
        return {str(k): decode(v, arrays, depth + 1) for k, v in tagged["d"].items()}
    if not isinstance(tagged["o"], str) or not isinstance(tagged.get("r", ""), str):
        raise ProtocolError("malformed description")
    return Opaque(tagged["o"][:100], tagged.get("r", "")[:200])


def pack(header: dict, arrays: list[np.ndarray]) -> bytes:
    """One message: header length, header JSON (with each array's dtype and shape), then each
    array's raw C-order bytes. numpy's .npy header would be parsed with ast on every call, which
    costs more than the rest of a small call together; this format is as plain and as safe."""
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


def _array_spec(spec: Any) -> tuple[np.dtype, tuple[int, ...], int]:
    """Validate one array description from the other side, ``[dtype, shape]``."""
    try:
        kind, shape = spec
    except Exception as exc:  # noqa: BLE001 - not a pair, or a pair that fails to unpack
        raise ProtocolError("bad array description") from exc
    return _checked_array(kind, shape)


# _checked_array's answers, by (dtype, *shape): a check describes the same few arrays on every
# call. Keys are what it accepted, so a description equal to one (2.0 for 2) gets its answer.
_CHECKED: dict[tuple, tuple[np.dtype, tuple[int, ...], int]] = {}
_CHECKED_MAX = 256


def _checked_array(kind: Any, shape: Any) -> tuple[np.dtype, tuple[int, ...], int]:
    """A numeric dtype and a sane shape, and the bytes they take."""
    if isinstance(kind, str) and isinstance(shape, list) and len(shape) <= 32:
        try:
            known = _CHECKED.get((kind, *shape))
        except TypeError:  # an unhashable item in the shape: refused below
            known = None
        if known is not None:
            return known
    checked = _check_array(kind, shape)
    if len(_CHECKED) < _CHECKED_MAX:
        _CHECKED[(kind, *checked[1])] = checked
    return checked


def _check_array(kind: Any, shape: Any) -> tuple[np.dtype, tuple[int, ...], int]:
    try:
        if not isinstance(kind, str) or not isinstance(shape, list) or len(shape) > 32:
            raise ProtocolError("bad array description")
        dtype = _dtype(kind)
        shape = tuple(map(int, shape))
    except ProtocolError:
        raise
    except Exception as exc:  # noqa: BLE001 - numpy's refusals of a forged dtype vary
        raise ProtocolError("bad array description") from exc
    if dtype.kind not in "biufc" or dtype.hasobject or min(shape, default=0) < 0:
        raise ProtocolError("unsupported array")
    size = dtype.itemsize * _product(shape)  # Python ints: a forged shape cannot overflow
    if size > MAX_ARRAY:
        raise TooLarge(f"an array of {_mib(size)} announced, at most {_mib(MAX_ARRAY)} allowed")
    return dtype, shape, size


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


class LastParsed:
    """``json.loads`` that remembers the last header it parsed, for ``unpack``: a check's calls
    to one function with arrays of the same shapes (their values travel in the inputs file)
    send the same request header, and often get the same reply header, byte for byte; parsing
    it again was a tenth of a small call's time. What it returns must only be read.
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
        raise TooLarge(f"a header of {_mib(size)} announced, at most {_mib(max_header)} allowed")
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
    specs = [_array_spec(spec) for spec in announced]
    total = 4 + size + sum(nbytes for _, _, nbytes in specs)
    if max_bytes is not None and total > max_bytes:
        raise TooLarge(f"{_mib(total)} announced, at most {_mib(max_bytes)} allowed")
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
        dtype, shape, nbytes = _checked_array(spec[0], spec[1])
        if spec[2] + nbytes > len(buffer):
            raise ProtocolError("shared array outside the file")
        count = nbytes // dtype.itemsize
        arrays.append(_frombuffer(buffer, dtype=dtype, count=count, offset=spec[2]).reshape(shape))
    return arrays
