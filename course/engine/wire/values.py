"""Values as tagged JSON: ``encode`` on the sending side, ``decode`` (which checks) on the reading side.

The tags are listed in ``messages``' docstring; ``messages.pack`` and ``messages.unpack`` carry
them. Imports only the standard library and numpy: the worker loads it before any learner code.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from course.engine.wire.checks import ProtocolError

# Taken once, at import: learner code in the worker may later replace numpy's attributes.
_ndarray, _generic, _asarray = np.ndarray, np.generic, np.asarray

MAX_ITEMS = 64
MAX_DEPTH = 6  # lesson 15: (model, losses, {"m": {"layers": [{...: array}]}})


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


def call_digest(name: str, args: tuple, kwargs: dict) -> str:
    """A digest of the call ``name(*args, **kwargs)`` as it travels to a worker: the function,
    the arguments' encoding and each array's dtype, shape and bytes. Two calls with the same
    digest hand learner code the same inputs."""
    import hashlib
    import json

    arrays: list[np.ndarray] = []
    encoded = [
        name,
        [encode(arg, arrays, 1) for arg in args],
        {k: encode(v, arrays, 1) for k, v in kwargs.items()},
    ]
    digest = hashlib.sha256(json.dumps(encoded, sort_keys=True, default=repr).encode())
    for array in arrays:
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


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
