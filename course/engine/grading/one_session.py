"""Grade many modules in one pytest session: a class's submissions, the warm grader's checks.

Each ``runner.grade`` pays for pytest's configuration, its plugins' registration and the
collection of the lesson's tests. ``in_session`` starts one session over every lesson's tests
and, in place of pytest's own test loop, hands its caller a function that runs one lesson's
tests for one module: a class (``grade_units``) grades every submission with it, and the warm
grader's forked children inherit the collected session and grade each check with it. Each
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


def in_session(lessons: Sequence[Lesson], body: Callable[[Callable[[Unit], LessonResult]], object]) -> str:
    """Run ``body`` inside one pytest session that has collected the tests of every one of
    ``lessons``, handing it ``grade``: ``grade(unit)`` grades one unit there, its lesson's
    tests only, as ``runner.grade`` would, and may be called any number of times, also in
    processes ``body`` forks (the warm grader's children inherit the collected session).
    Returns what pytest printed: a ``body`` never called means the session itself failed."""
    tests = integrity.trusted(lessons[0].grading_tests)  # the pristine folder, if any is changed
    files = {
        lesson.module: (tests.temporary / lesson.grading_tests.name)
        if tests.temporary
        else lesson.grading_tests
        for lesson in lessons
    }
    plugin = GradingPlugin(None)
    replayer = Replayer(None)
    driver = _Driver(plugin, replayer, files, body, tests.modified)
    try:
        return run_pytest(list(files.values()), [plugin, replayer, driver])
    finally:
        tests.cleanup()


def grade_units(
    lessons: Sequence[Lesson],
    next_unit: Callable[[], Unit | None],
    done: Callable[[Unit, LessonResult | Exception], None],
) -> str:
    """Grade every unit ``next_unit`` returns (until it returns None), each of one of
    ``lessons``, calling ``done`` with each result as soon as it is known, or with the
    exception the grader itself hit on that unit (the session goes on). Returns what pytest
    printed: a unit never handed to ``done`` means the session itself failed (see there)."""

    def body(grade: Callable[[Unit], LessonResult]) -> None:
        while (unit := next_unit()) is not None:
            try:
                result: LessonResult | Exception = grade(unit)
            except Exception as error:  # noqa: BLE001 - the grader's own failure, on this unit only
                result = error
            done(unit, result)

    return in_session(lessons, body)


class _Driver:
    """The session's test loop: ``body``, which grades one unit at a time, its lesson's tests
    only."""

    def __init__(
        self,
        plugin: GradingPlugin,
        replayer: Replayer,
        files: dict[str, Path],
        body: Callable[[Callable[[Unit], LessonResult]], object],
        modified: list[str],
    ) -> None:
        self.plugin, self.replayer, self.files = plugin, replayer, files
        self.body, self.modified = body, modified
        self.errors: dict[str, list[str]] = {}  # a test file's node id -> its collection errors
        self.session: pytest.Session | None = None
        self.by_file: dict[Path, list[pytest.Item]] = {}

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.errors.setdefault(report.nodeid.split("::")[0], []).append(str(report.longrepr)[-2000:])

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        self.session = session
        for item in session.items:
            self.by_file.setdefault(Path(item.path).resolve(), []).append(item)
        self.body(self.grade)
        return True

    def grade(self, unit: Unit) -> LessonResult:
        session = self.session
        assert session is not None, "grade is handed out inside the session only"
        test_file = self.files[unit.lesson.module].resolve()
        node = test_file.relative_to(session.config.rootpath.resolve()).as_posix()
        return self._grade(session, unit, self.by_file.get(test_file, []), self.errors.get(node, []))

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
