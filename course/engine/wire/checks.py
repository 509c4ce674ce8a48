"""What a reader of the wire refuses: its errors, and the check of an array the other side describes.

An array description (``[dtype, shape]``, in a message's header or the shared inputs' layout) is
checked before any of its bytes are read: a numeric dtype, a sane shape, at most ``MAX_ARRAY``
bytes. ``messages`` and ``values`` raise these errors too. Imports only the standard library and
numpy: the worker loads it before any learner code.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# Taken once, at import: learner code in the worker may later replace numpy's attributes.
_dtype = np.dtype
_product = math.prod

MAX_ARRAY = 512 * 1024 * 1024


class ProtocolError(Exception):
    """The other side sent something that is not a valid message."""


class TooLarge(ProtocolError):
    """The other side announced a message larger than the reader accepts."""


def array_spec(spec: Any) -> tuple[np.dtype, tuple[int, ...], int]:
    """Validate one array description from the other side, ``[dtype, shape]``."""
    try:
        kind, shape = spec
    except Exception as exc:  # noqa: BLE001 - not a pair, or a pair that fails to unpack
        raise ProtocolError("bad array description") from exc
    return checked_array(kind, shape)


# checked_array's answers, by (dtype, *shape): a check describes the same few arrays on every
# call. Keys are what it accepted, so a description equal to one (2.0 for 2) gets its answer.
_CHECKED: dict[tuple, tuple[np.dtype, tuple[int, ...], int]] = {}
_CHECKED_MAX = 256


def checked_array(kind: Any, shape: Any) -> tuple[np.dtype, tuple[int, ...], int]:
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
        raise TooLarge(f"an array of {mib(size)} announced, at most {mib(MAX_ARRAY)} allowed")
    return dtype, shape, size


def mib(size: int) -> str:
    """``size`` bytes in MiB, for the errors' messages."""
    return f"{size / 2**20:,.1f} MiB"
