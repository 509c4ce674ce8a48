"""Grade several lessons of one folder at once: one forked process per lesson, as many at a time
as there are cores.

The warm grader's child that took a request for several lessons (``course check --all``, the
all-passed ``course next``) forks one process per lesson; each grades with ``runner.grade``
exactly as a single check does (its own worker, its own pytest session) and writes its result
as JSON to a pipe. The parent reads only those pipes: learner code runs in the workers, never
here, and a result that does not arrive is None (the command then grades that lesson itself).
"""

from __future__ import annotations

import json
import os
import select
from collections.abc import Sequence
from pathlib import Path

from course.catalog import Lesson
from course.engine.processes import Worker
from course.engine.runner import grade


def grade_side_by_side(
    lessons: Sequence[Lesson], folder: Path, spare: tuple[Worker, Path], costs: dict[str, float]
) -> list[dict | None]:
    """Each lesson graded in a process of its own forked from this warm one, as many at once as
    there are cores; their results as dicts, in order. A single lesson is graded here, with
    ``spare`` (a blank worker started ahead); several each start their own (a worker belongs
    to the process that started it), so the spare is stopped. A lesson
    whose process fails gets None in its place, and the caller grades it itself. ``costs``:
    seconds per lesson module, as measured before; the longest start first."""
    if len(lessons) == 1:
        return [grade(lessons[0], folder, spare=spare).to_dict()]
    spare[0].kill()  # each child starts its own worker, in parallel with its pytest
    at_once = max(1, min(os.cpu_count() or 1, len(lessons)))
    results: list[dict | None] = [None] * len(lessons)
    running: dict[int, tuple[int, int, list[bytes]]] = {}  # read end -> (pid, index, chunks)
    # The longest first (as the warm-up measured them), so that no long lesson starts last.
    pending = sorted(range(len(lessons)), key=lambda index: -costs.get(lessons[index].module, 0.0))
    while pending or running:
        while pending and len(running) < at_once:
            index = pending.pop(0)
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                code = 0
                try:
                    data = json.dumps(grade(lessons[index], folder).to_dict()).encode()
                    with os.fdopen(write, "wb") as out:
                        out.write(data)
                except BaseException:  # noqa: BLE001 - the parent records no result for it
                    code = 1
                os._exit(code)
            os.close(write)
            running[read] = (pid, index, [])
        ready, _, _ = select.select(list(running), [], [])
        for read in ready:
            chunk = os.read(read, 1 << 16)
            if chunk:
                running[read][2].append(chunk)
                continue
            pid, index, chunks = running.pop(read)
            os.close(read)
            _, status = os.waitpid(pid, 0)
            if status == 0:
                results[index] = json.loads(b"".join(chunks))
    return results
