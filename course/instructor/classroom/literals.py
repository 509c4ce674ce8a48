"""Lesson files that carry data: string, bytes and number literals beyond the skeleton's.

A lesson's code needs few literals; a table of answers recorded from the public inputs is
nothing but literals. `course grade` measures, per lesson file, the literals the skeleton does
not already hold (each literal's size: a string's or bytes' length in bytes, a number's written
length; docstrings count, since data can hide there) and flags a file whose total exceeds
``LIMIT``. Like a similarity flag it is a problem on the row that changes no points: an
instructor's secret makes such a table useless, and the instructor decides.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from course.content.catalog import Lesson

LIMIT = 4096  # bytes of literals beyond the skeleton's


def literals(source: bytes) -> Counter[tuple[str, object]]:
    """Every string, bytes and number literal of ``source`` (as a multiset); empty when it does
    not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return Counter()
    return Counter(
        (type(node.value).__name__, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str | bytes | int | float | complex)
        and not isinstance(node.value, bool)
    )


def _size(value: object) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bytes):
        return len(value)
    return len(repr(value))


def beyond_skeleton(source: bytes, skeleton: bytes) -> int:
    """The bytes of ``source``'s literals that its skeleton does not hold."""
    extra = literals(source) - literals(skeleton)
    return sum(_size(value) * count for (_, value), count in extra.items())


def sizes(sources: Mapping[str, bytes], lessons: Iterable[Lesson]) -> dict[str, int]:
    """Each lesson's literal bytes beyond its skeleton (by module), of the files a submission
    held (by file name)."""
    found = {}
    for lesson in lessons:
        if lesson.file_name in sources:
            try:
                skeleton = lesson.skeleton.read_bytes()
            except OSError:
                skeleton = b""
            found[lesson.module] = beyond_skeleton(sources[lesson.file_name], skeleton)
    return found


def helper_sizes(helpers: Mapping[str, bytes]) -> dict[str, int]:
    """Each helper module's literal bytes (by file name): a helper has no skeleton, so all."""
    return {file: beyond_skeleton(source, b"") for file, source in helpers.items()}


def flag(rows: Sequence[dict], lessons: Sequence[Lesson]) -> None:
    """Add a problem to every row whose lesson file holds more than ``LIMIT`` bytes of literals
    beyond its skeleton's, or whose helper module (``utils.py``) holds more than ``LIMIT``."""
    for row in rows:
        held = {lesson.file_name: row.get("literals", {}).get(lesson.module, 0) for lesson in lessons}
        held.update(row.get("helper_literals", {}))
        for file, size in held.items():
            if isinstance(size, int) and size > LIMIT:
                row["problems"].append(
                    f"{file} holds {size / 1024:.1f} KiB of string, bytes and number literals "
                    f"beyond the skeleton's (more than {LIMIT // 1024} KiB: data, such as "
                    "memorised answers?)"
                )
