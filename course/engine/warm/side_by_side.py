"""Grade several lessons of one folder at once: one forked process per core, each taking the
next lesson from a shared queue until none is left.

The warm grader's child that took a request for several lessons (``course check --all``, the
all-passed ``course next``) queues the lessons, the longest first (the costs the warm-up
measured), in a pipe every forked process reads from: a process takes the next lesson when it
is done with its last one, so a lesson that costs more or less than the warm-up said never
leaves one core idle while the other works through a fixed share. Each grades its lessons as a
single check is graded (``GradeOne``: a worker of its own per lesson, in the server's collected
session) and sends each result back (``forked``). A result that does not arrive is None (the
command then grades that lesson itself).
"""

from __future__ import annotations

import os
import select
from collections.abc import Callable, Sequence
from pathlib import Path

from course.content.catalog import Lesson
from course.engine.grading import forked
from course.engine.results import LessonResult
from course.engine.sandbox.process import Worker

# grade_one(lesson, folder, spare): one lesson of the folder, with a blank worker started ahead
GradeOne = Callable[[Lesson, Path, "tuple[Worker, Path] | None"], LessonResult]

_ENTRY = 4  # bytes per queued lesson index: one read takes exactly one (all are queued at once)


def longest_first(costs: Sequence[float]) -> list[int]:
    """The indices of ``costs``, the most costly first (ties in their given order)."""
    return sorted(range(len(costs)), key=lambda i: -costs[i])


def _queue(order: Sequence[int]) -> int:
    """A pipe holding ``order`` (closed for writing): the read end, shared by every process."""
    read, write = os.pipe()
    payload = b"".join(index.to_bytes(_ENTRY, "little") for index in order)
    if len(payload) > select.PIPE_BUF:  # written whole, so no reader sees part of an entry
        raise ValueError(f"{len(order)} lessons are more than one request may queue")
    os.write(write, payload)
    os.close(write)
    return read


def _take(queue: int) -> int | None:
    """The next queued index, or None when the queue is empty."""
    entry = os.read(queue, _ENTRY)
    return int.from_bytes(entry, "little") if len(entry) == _ENTRY else None


def grade_side_by_side(
    lessons: Sequence[Lesson],
    folder: Path,
    spare: tuple[Worker, Path],
    costs: dict[str, float],
    grade_one: GradeOne,
) -> list[dict | None]:
    """Each lesson graded in a process forked from this warm one, as many processes as there
    are cores; their results as dicts, in order. A single lesson is graded here, with
    ``spare`` (a blank worker started ahead); with several, each grade starts its own worker
    (a worker belongs to the process that started it), so the spare is stopped. A lesson whose
    result does not arrive gets None in its place, and the caller grades it itself. ``costs``:
    seconds per lesson module, as measured before."""
    if len(lessons) == 1:
        return [grade_one(lessons[0], folder, spare).to_dict()]
    spare[0].kill()
    at_once = max(1, min(os.cpu_count() or 1, len(lessons)))
    results: list[dict | None] = [None] * len(lessons)
    queue = _queue(longest_first([costs.get(lesson.module, 0.0) for lesson in lessons]))

    def grade_queued(send: forked.Send) -> None:
        while (index := _take(queue)) is not None:
            send([index, grade_one(lessons[index], folder, None).to_dict()])

    def received(value: object) -> None:
        if isinstance(value, list) and len(value) == 2:
            index, result = value
            if isinstance(index, int) and 0 <= index < len(lessons) and isinstance(result, dict):
                results[index] = result

    try:
        forked.fork_each(at_once, grade_queued, received)
    finally:
        os.close(queue)
    return results
