"""Remembered oracles: a grading test's reference computation done once per input, not per check.

An oracle (a plain loop, a float64 reference) sees the same inputs, made from fixed seeds, on
every check, and some oracles are slow (lesson 11's loops over heads and tokens, lesson 13's
(T, S) scores). ``@remembered`` keeps an oracle's results in the grader's own process (learner
code runs in workers), keyed by a digest of its arguments' exact contents and of the grading
secret in use (a function that draws inputs from a seed sees other ones under a secret), so a
remembered result is the one the oracle would compute. The warm grader fills it while it warms up on the
solutions, and every process it forks starts with it filled. Results are handed out read-only
(arrays) or rebuilt (lists, dicts), so one check cannot change the next one's; an argument the
digest cannot describe is simply not remembered.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np

from course.engine.testing import secret

F = TypeVar("F", bound=Callable[..., Any])
KEEP = 4096  # results kept per oracle, the least recently used dropped first
_PINNED: dict[int, Any] = {}  # functions named in a key, kept alive so that their id stays theirs
_WARMING = [False]


@contextlib.contextmanager
def warming_up() -> Iterator[None]:
    """While this lasts (the warm grader's first grade of each lesson), checks also compute the
    variants that would name a classic mistake, which are otherwise computed only for a wrong
    answer: their remembered oracles are then at hand in every later grade."""
    _WARMING[0] = True
    try:
        yield
    finally:
        _WARMING[0] = False


def warming() -> bool:
    return _WARMING[0]


class _Unknown(Exception):
    """An argument the digest cannot describe exactly."""


def _feed(digest: Any, value: Any) -> None:
    if isinstance(value, np.ndarray):
        digest.update(f"a{value.dtype.str}{value.shape}".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, np.generic):
        digest.update(f"g{value.dtype.str}".encode() + value.tobytes())
    elif value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        digest.update(f"{type(value).__name__}:{value!r};".encode())
    elif isinstance(value, (tuple, list)):
        digest.update(f"{type(value).__name__}{len(value)}(".encode())
        for item in value:
            _feed(digest, item)
        digest.update(b")")
    elif isinstance(value, dict):
        digest.update(f"d{len(value)}{{".encode())
        for key in sorted(value, key=repr):
            _feed(digest, key)
            _feed(digest, value[key])
        digest.update(b"}")
    elif callable(value) and getattr(value, "__qualname__", "<lambda>").isidentifier():
        # a named function of the grading tests (an ``edit`` or ``combine`` argument): the same
        # object on every check of this process, so its identity is exact (and pinned, so no
        # other function can ever get its id)
        _PINNED.setdefault(id(value), value)
        digest.update(f"f{value.__module__}.{value.__qualname__}@{id(value)};".encode())
    else:
        raise _Unknown(type(value).__name__)


def _frozen(value: Any) -> Any:
    """``value`` safe to hand out again: arrays read-only, containers rebuilt."""
    if isinstance(value, np.ndarray):
        if value.flags.writeable:
            value = value.copy()
            value.setflags(write=False)
        return value
    if isinstance(value, tuple):
        return tuple(_frozen(item) for item in value)
    if isinstance(value, list):
        return [_frozen(item) for item in value]
    if isinstance(value, dict):
        return {key: _frozen(item) for key, item in value.items()}
    return value


def remembered(oracle: F) -> F:
    """``oracle`` computed once per exact input in this process (see the module's docstring)."""
    kept: OrderedDict[bytes, Any] = OrderedDict()

    @functools.wraps(oracle)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        digest = hashlib.blake2b(digest_size=20)
        # An oracle may draw its own inputs from a seed (``secret.rng``): keyed by the secret too.
        digest.update(secret.identity().encode() + b";")
        try:
            _feed(digest, args)
            _feed(digest, kwargs)
        except _Unknown:
            return oracle(*args, **kwargs)
        key = digest.digest()
        if key in kept:
            kept.move_to_end(key)
        else:
            kept[key] = _frozen(oracle(*args, **kwargs))
            if len(kept) > KEEP:
                kept.popitem(last=False)
        return _frozen(kept[key])

    wrapper.remembered = kept  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]
