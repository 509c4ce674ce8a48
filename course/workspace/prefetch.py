"""A check's grading, started as soon as the command knows the folder and the lessons.

A warm check spends most of its time waiting for the warm grader; whatever the command does
before it sends the request (reading the progress state, loading the screens' code) adds to
that wait. So `course check N` and `course check --all` look the lessons up in the result
cache and send the request for the others first (``start``), and only then open the learner's
session; ``course.workspace.actions.grade_lessons`` takes the request ``start`` sent and reads
its answer. The cache keys are computed here, before anything is graded: a file saved
meanwhile is never credited with the grade.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from course.content.catalog import Lesson
    from course.engine.results import LessonResult


class Started:
    """The lessons asked for, what the result cache answered, and the pending request."""

    def __init__(
        self,
        modules: list[str],
        folder: Path,
        fresh: bool,
        build: str,
        keys: list[str | None],
        results: list[LessonResult | None],
        connection: socket.socket | None,
    ) -> None:
        self.modules = modules
        self.folder = folder
        self.fresh = fresh
        self.build = build  # the course build's fingerprint the keys were computed with
        self.keys = keys
        self.results = results
        self.connection = connection  # the warm grader's answer comes on it; None: no request

    @property
    def missing(self) -> list[int]:
        """The indices of the lessons the cache did not answer."""
        return [index for index, result in enumerate(self.results) if result is None]

    def serves(self, lessons: Sequence[Lesson], folder: Path, fresh: bool) -> bool:
        """Whether this is the grading of exactly these lessons of ``folder``."""
        return (
            self.modules == [lesson.module for lesson in lessons]
            and self.folder == Path(folder).resolve()
            and self.fresh == fresh
        )

    def drop(self) -> None:
        """Give up the request (its answer, if any, is not read)."""
        if self.connection is not None:
            self.connection.close()
            self.connection = None


def start(lessons: Sequence[Lesson], folder: Path, fresh: bool = False) -> Started:
    """Key each lesson of ``folder`` and take what the result cache holds for it (unless
    ``fresh``), then send the warm grader one request for the others, if one runs."""
    from course.engine.warm import client
    from course.workspace import result_cache

    folder = Path(folder).resolve()
    caching = result_cache.enabled() and not fresh
    build = client.fingerprint(again=False) if caching else ""
    tree = result_cache.tree_digest(folder) if caching else ""
    keys = [result_cache.key(folder, lesson.module, build, tree) if caching else None for lesson in lessons]
    results: list[LessonResult | None] = [
        result_cache.load(folder, lesson.module, digest) if caching else None
        for lesson, digest in zip(lessons, keys, strict=True)
    ]
    started = Started([lesson.module for lesson in lessons], folder, fresh, build, keys, results, None)
    missing = [lessons[index].module for index in started.missing]
    if missing and client.enabled():
        started.connection = client.send(missing, folder, client.REQUEST_SECONDS)
    return started
