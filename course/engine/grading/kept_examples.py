"""The examples of passing property checks, kept in a file between processes.

``replay`` records the arguments hypothesis drew for each property check that passed and replays
them in later grades of the same process; a cold check (no warm grader) is a fresh process each
time. The learner's own checks (``course.workspace.actions.grade_lessons``, with the result cache
on) hand the runner a file in the user's private cache folder: its examples are loaded before a
grade and the new ones saved after it.

The file is trusted as the result cache is: the learner's own convenience, written by the
command, never by a process running learner code, and never read by ``course grade`` or the
GitHub Classroom command. It is keyed by what decides the examples: the grading test file's
content, the course build's fingerprint (from the caller), and the versions of Python,
hypothesis and numpy; any other key, any malformed content or any value of a type not listed
below, and the file is ignored. A replay whose example fails hands the check back to
hypothesis, which then grades it from its first example, as without a file.

Values are JSON, tagged: arrays of numbers or booleans (dtype, shape, order and bytes, base64),
numpy scalars, bool, int, float and complex (exact: hexadecimal), str, bytes, None, and tuples,
lists and dicts of these.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from course import atomic_file

SCHEMA = 1
FILE_LIMIT = 16 * 2**20  # a larger file is not ours: ignored unread
_NUMERIC = "biufc"


class Unkeepable(Exception):
    """A value this file cannot hold exactly."""


def pack(value: Any) -> Any:
    """``value`` as tagged JSON data (``Unkeepable`` for anything not listed in the docstring)."""
    kind = type(value)
    if kind is np.ndarray:
        if value.dtype.kind not in _NUMERIC or value.dtype.hasobject:
            raise Unkeepable(str(value.dtype))
        order = "F" if value.flags.f_contiguous and not value.flags.c_contiguous else "C"
        raw = value.tobytes(order=order)
        return {"a": [value.dtype.str, list(value.shape), order, base64.b64encode(raw).decode()]}
    if isinstance(value, np.generic) and value.dtype.kind in _NUMERIC:
        return {"g": [value.dtype.str, base64.b64encode(value.tobytes()).decode()]}
    if kind is bool:
        return {"b": value}
    if kind is int:
        return {"i": str(value)}
    if kind is float:
        return {"f": value.hex()}
    if kind is complex:
        return {"c": [value.real.hex(), value.imag.hex()]}
    if kind is str:
        return {"s": value}
    if kind is bytes:
        return {"y": base64.b64encode(value).decode()}
    if value is None:
        return {"n": 0}
    if kind is tuple:
        return {"t": [pack(item) for item in value]}
    if kind is list:
        return {"l": [pack(item) for item in value]}
    if kind is dict:
        return {"d": [[pack(key), pack(item)] for key, item in value.items()]}
    raise Unkeepable(kind.__name__)


def unpack(data: Any) -> Any:
    """The value ``pack`` gave ``data`` for; ValueError (or TypeError) if it is not such data."""
    if not isinstance(data, dict) or len(data) != 1:
        raise ValueError("not a kept value")
    ((tag, body),) = data.items()
    if tag == "a":
        dtype_name, shape, order, text = body
        dtype = np.dtype(dtype_name)
        if dtype.kind not in _NUMERIC or dtype.hasobject or order not in ("C", "F"):
            raise ValueError("not an array of numbers")
        flat = np.frombuffer(base64.b64decode(text, validate=True), dtype=dtype)
        return flat.reshape([int(n) for n in shape], order=order).copy(order=order)
    if tag == "g":
        dtype = np.dtype(body[0])
        if dtype.kind not in _NUMERIC or dtype.hasobject:
            raise ValueError("not a number")
        return np.frombuffer(base64.b64decode(body[1], validate=True), dtype=dtype)[0]
    if (tag == "b" and type(body) is bool) or (tag == "s" and type(body) is str):
        return body
    if tag == "i" and type(body) is str:
        return int(body)
    if tag == "f":
        return float.fromhex(body)
    if tag == "c":
        return complex(float.fromhex(body[0]), float.fromhex(body[1]))
    if tag == "y":
        return base64.b64decode(body, validate=True)
    if tag == "n":
        return None
    if tag == "t":
        return tuple(unpack(item) for item in body)
    if tag == "l":
        return [unpack(item) for item in body]
    if tag == "d":
        return {unpack(key): unpack(item) for key, item in body}
    raise ValueError(f"not a kept value (tag {tag!r})")


def file_key(test_file: Path, build: str) -> str:
    """What decides the examples of ``test_file``'s property checks, as one digest (the grading
    secret's identity among it)."""
    import hypothesis

    from course.engine.testing import secret

    identity = secret.identity()
    versions = f"{sys.version}\0{hypothesis.__version__}\0{np.__version__}\0{build}\0{SCHEMA}\0{identity}"
    return hashlib.sha256(versions.encode() + b"\0" + test_file.read_bytes()).hexdigest()


def load(path: Path, key: str) -> dict[str, list[dict[str, Any]]]:
    """The kept examples per node id (test file's own ids) if ``path`` holds them under ``key``;
    else nothing. Never raises for what the file holds."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(FILE_LIMIT + 1)
        data = json.loads(raw) if len(raw) <= FILE_LIMIT else None
        if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("checks"), dict):
            return {}
        kept: dict[str, list[dict[str, Any]]] = {}
        for node, examples in data["checks"].items():
            if isinstance(node, str) and isinstance(examples, list):
                kept[node] = [_unpack_example(example) for example in examples]
        return kept
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError):
        return {}


def _unpack_example(example: Any) -> dict[str, Any]:
    if not isinstance(example, dict) or not all(isinstance(name, str) for name in example):
        raise ValueError("an example is a dict of arguments by name")
    return {name: unpack(value) for name, value in example.items()}


def save(path: Path, key: str, checks: dict[str, list[dict[str, Any]]]) -> None:
    """Keep ``checks`` (examples per node id) in ``path`` under ``key``, atomically; checks
    with a value this file cannot hold are left out. Failures are ignored."""
    packed = {}
    for node, examples in checks.items():
        try:
            packed[node] = [{name: pack(value) for name, value in example.items()} for example in examples]
        except (Unkeepable, RecursionError):
            continue
    with contextlib.suppress(OSError):
        atomic_file.replace(path, json.dumps({"key": key, "checks": packed}))


class KeptFile:
    """One grade's examples file: where it is, the key for this test file and build, and the
    checks it held when the grade began."""

    def __init__(self, test_file: Path, path: Path, build: str) -> None:
        self.test_file, self.path = test_file, path
        self.key = file_key(test_file, build)
        self.checks = load(path, self.key)

    def keep_new(self) -> None:
        """Write this process's recordings of the test file if the grade made new ones."""
        from course.engine.grading import replay

        recorded = replay.recorded_in(self.test_file)
        if recorded.keys() - self.checks.keys():
            save(self.path, self.key, recorded)


def adopt(test_file: Path, examples: tuple[Path, str]) -> KeptFile:
    """Hand ``replay`` the examples kept for ``test_file`` in ``examples`` (a file and the
    course build's fingerprint); ``KeptFile.keep_new`` writes what the grade adds."""
    from course.engine.grading import replay

    kept = KeptFile(test_file, *examples)
    replay.adopt(test_file, kept.checks)
    return kept
