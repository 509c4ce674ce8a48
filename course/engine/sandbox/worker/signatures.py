"""Whether a learner's function can take a call's arguments, checked before it is called.

``binds`` answers from a plain function's code object, cheaply enough for every call; only when
it cannot say yes does ``mismatch`` ask ``inspect`` and describe the mismatch in Python's own
words. Imported with ``main``, before anything of the learner's runs.
"""

from __future__ import annotations

import inspect
from types import FunctionType
from typing import Any

_VARARGS, _VARKEYWORDS = inspect.CO_VARARGS, inspect.CO_VARKEYWORDS


def binds(function: Any, args: tuple, kwargs: dict) -> bool:
    """True when ``function`` surely takes these arguments, as ``inspect.Signature.bind`` would
    say, read from a plain function's code object (far cheaper than ``inspect``: the check
    runs on every call). False when it cannot or when unsure (a callable of another kind,
    one with attributes such as ``__signature__`` or ``__wrapped__``, an argument passed by
    keyword to a positional-only parameter): ``mismatch`` decides then."""
    if type(function) is not FunctionType or type(function.__dict__) is not dict or function.__dict__:
        return False
    code, defaults, kwdefaults = function.__code__, function.__defaults__, function.__kwdefaults__
    defaults = () if defaults is None else defaults
    if type(defaults) is not tuple or not (kwdefaults is None or type(kwdefaults) is dict):
        return False
    count, kwonly, flags = code.co_argcount, code.co_kwonlyargcount, code.co_flags
    names = code.co_varnames
    if len(defaults) > count or len(names) < count + kwonly or (len(args) > count and not flags & _VARARGS):
        return False
    positional, keyword_only = names[:count], names[count : count + kwonly]
    for key in kwargs:
        if key in positional:
            if positional.index(key) < max(code.co_posonlyargcount, len(args)):
                return False  # positional-only, or given twice
        elif key not in keyword_only and not flags & _VARKEYWORDS:
            return False
    required = positional[len(args) : count - len(defaults)]
    if any(name not in kwargs for name in required):
        return False
    return all(name in kwargs or (kwdefaults is not None and name in kwdefaults) for name in keyword_only)


def mismatch(function: Any, args: tuple, kwargs: dict) -> dict | None:
    """Why ``function``'s signature cannot take these arguments, found without running it (a
    "SignatureMismatch" error with the learner's signature as data), or None when it can."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # no signature to read: the call itself will tell
        return None
    try:
        signature.bind(*args, **kwargs)
        return None
    except TypeError as exc:
        complaint = str(exc)
    # Python's own words for this call ("linear() takes 2 positional arguments but 3 were
    # given"), from an empty function of the same signature: names and kinds only, no defaults'
    # values or annotations, so nothing of the learner's is evaluated.
    empty = inspect.Parameter.empty
    bare = signature.replace(
        parameters=[
            p.replace(annotation=empty, default=empty if p.default is empty else None)
            for p in signature.parameters.values()
        ],
        return_annotation=empty,
    )
    namespace: dict[str, Any] = {}
    try:
        exec(f"def stand_in{bare}:\n    pass\n", namespace)  # noqa: S102 - built from identifiers
        stand_in = namespace["stand_in"]
        qualname = getattr(function, "__qualname__", None)
        stand_in.__qualname__ = qualname if isinstance(qualname, str) else "function"
        stand_in(*args, **kwargs)
    except TypeError as exc:
        complaint = str(exc)
    except Exception:  # noqa: BLE001 - keep inspect's words
        pass
    return {
        "type": "SignatureMismatch",
        "message": complaint[:2000],
        "signature": str(bare)[:500],
        "frames": [],
        "origin": None,
    }
