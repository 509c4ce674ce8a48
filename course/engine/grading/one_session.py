"""Grade many learners' modules in one pytest session: a class's submissions.

Each ``runner.grade`` pays for pytest's configuration, its plugins' registration and the
collection of the lesson's tests. A class grades the same lessons for every submission, so
``grade_units`` starts one session over every lesson's tests and, in place of pytest's own test
loop, runs one lesson's tests for one module at a time, as ``next_unit`` hands them out. Each
module gets records of its own (``GradingPlugin.begin``), the ``lesson`` fixture gives that
module, and every fixture is torn down after its last test, so nothing of one grade reaches the
next: a unit's result is the one ``runner.grade`` gives for the same module
(tests/test_class_stream.py holds this). Learner code still runs only in each module's own
workers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from course.content.catalog import Lesson
from course.engine import integrity
from course.engine.calls.learner_module import LearnerModule
from course.engine.grading.plugin import LEARNER, GradingPlugin
from course.engine.grading.replay import Replayer
from course.engine.grading.report import assemble
from course.engine.grading.runner import finish, run_pytest
from course.engine.results import LessonResult


class Unit:
    """One lesson of one folder to grade, with its module already loading in ``learner``
    (whose workers the grade closes). ``tag``: the caller's, handed back with the result."""

    def __init__(self, lesson: Lesson, source_dir: Path, learner: LearnerModule, tag: object = None) -> None:
        self.lesson = lesson
        self.source_dir = source_dir
        self.learner = learner
        self.tag = tag


def grade_units(
    lessons: Sequence[Lesson],
    next_unit: Callable[[], Unit | None],
    done: Callable[[Unit, LessonResult | Exception], None],
) -> str:
    """Grade every unit ``next_unit`` returns (until it returns None), each of one of
    ``lessons``, calling ``done`` with each result as soon as it is known, or with the
    exception the grader itself hit on that unit (the session goes on). Returns what pytest
    printed: a unit never handed to ``done`` means the session itself failed (see there)."""
    tests = integrity.trusted(lessons[0].grading_tests)  # the pristine folder, if any is changed
    files = {
        lesson.module: (tests.temporary / lesson.grading_tests.name)
        if tests.temporary
        else lesson.grading_tests
        for lesson in lessons
    }
    plugin = GradingPlugin(None)
    replayer = Replayer(None)
    driver = _Driver(plugin, replayer, files, next_unit, done, tests.modified)
    try:
        return run_pytest(list(files.values()), [plugin, replayer, driver])
    finally:
        tests.cleanup()


class _Driver:
    """The session's test loop: one unit at a time, its lesson's tests only."""

    def __init__(
        self,
        plugin: GradingPlugin,
        replayer: Replayer,
        files: dict[str, Path],
        next_unit: Callable[[], Unit | None],
        done: Callable[[Unit, LessonResult | Exception], None],
        modified: list[str],
    ) -> None:
        self.plugin, self.replayer, self.files = plugin, replayer, files
        self.next_unit, self.done, self.modified = next_unit, done, modified
        self.errors: dict[str, list[str]] = {}  # a test file's node id -> its collection errors

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.errors.setdefault(report.nodeid.split("::")[0], []).append(str(report.longrepr)[-2000:])

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        by_file: dict[Path, list[pytest.Item]] = {}
        for item in session.items:
            by_file.setdefault(Path(item.path).resolve(), []).append(item)
        while (unit := self.next_unit()) is not None:
            test_file = self.files[unit.lesson.module].resolve()
            node = test_file.relative_to(session.config.rootpath.resolve()).as_posix()
            try:
                result: LessonResult | Exception = self._grade(
                    session, unit, by_file.get(test_file, []), self.errors.get(node, [])
                )
            except Exception as error:  # noqa: BLE001 - the grader's own failure, on this unit only
                result = error
            self.done(unit, result)
        return True

    def _grade(
        self, session: pytest.Session, unit: Unit, items: list[pytest.Item], errors: list[str]
    ) -> LessonResult:
        started = time.monotonic()
        learner = unit.learner
        learner.restart_clock()
        session.config.stash[LEARNER] = learner
        self.replayer.learner = learner
        self.plugin.collection_errors = errors
        try:
            run = self.plugin.begin(learner, items)
            for index, item in enumerate(run):
                following = run[index + 1] if index + 1 < len(run) else None  # None: tear all down
                item.ihook.pytest_runtest_protocol(item=item, nextitem=following)
            result = assemble(unit.lesson, self.plugin, "")
            result.output = learner.output()
            result.learner_seconds = learner.call_seconds
        finally:
            learner.close()
        return finish(result, unit.lesson, unit.source_dir, self.modified, started)
