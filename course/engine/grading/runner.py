"""Grade one lesson: run its tests under a trusted pytest configuration against a learner's folder.

The learner's module is imported only in a worker process (see ``learner_module``). pytest runs
here with plugin autoloading off, the course's own ini file, no cache, no conftest from the
learner's folder, and the grading plugin, which records results as data; ``report`` turns those
records into the lesson's result and words the notices about the learner's folder.
"""

from __future__ import annotations

import io
import os
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from course.content.catalog import Lesson
from course.engine import integrity
from course.engine.calls import learner_module
from course.engine.grading import kept_examples, learner_imports
from course.engine.grading.report import (
    assemble,
    encoding_notice,
    ignored_files_notice,
    missing_file_result,
    oversized_file_result,
)
from course.engine.results import LessonResult
from course.engine.sandbox import landlock
from course.engine.sandbox.limits import Limits
from course.engine.sandbox.process import Worker
from course.engine.testing import misconceptions, secret

TRUSTED_INI = Path(__file__).with_name("grading.ini")
SECRET_NOTICE = "Graded with an instructor's secret: its inputs are not the public ones."


def _pytest_args(test_files: list[Path]) -> list[str]:
    folder = Path(os.path.commonpath([test_file.parent for test_file in test_files]))
    return [
        *map(str, test_files),
        "-c",
        str(TRUSTED_INI),
        "--rootdir",
        str(folder),
        "--confcutdir",
        str(folder),
        "--import-mode=importlib",
        "--assert=plain",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:terminal",
        "-p",
        "no:logging",
        "-p",
        "no:faulthandler",
        "-p",
        "no:doctest",
        "-p",
        "no:junitxml",
        "-p",
        "no:pastebin",
        "-p",
        "no:nose",
        "-p",
        "no:unittest",
        "-p",
        "no:stepwise",
        "-p",
        "no:warnings",
        "-p",
        "no:debugging",
        "-p",
        "no:unraisableexception",  # these two run gc.collect() twice per session
        "-p",
        "no:threadexception",
        # Grading tests use the `lesson` fixture and markers only: pytest's fixtures for files,
        # patching, warnings and output capture (a file per test) are not needed, and each
        # registered plugin costs its share of every grade.
        *("-p", "no:capture", "-p", "no:legacypath", "-p", "no:tmpdir", "-p", "no:monkeypatch"),
        *("-p", "no:recwarn", "-p", "no:setuponly", "-p", "no:setupplan", "-p", "no:subtests"),
        *("-p", "no:reports", "-p", "no:skipping"),
    ]


_FROZEN = [False]  # gc.get_freeze_count() would walk every frozen object to count them


def _freeze_what_is_loaded() -> None:
    """Once per process, before its first grade: the objects of every module loaded so far
    (numpy, pytest, hypothesis, the course) are left out of the garbage collector's work from
    now on (``gc.freeze``). They live as long as the process anyway, and a cold check would
    otherwise walk them all in each full collection (hypothesis makes one when it first seeds
    its random generator). Not again later: what later grades leave behind must stay
    collectable."""
    if not _FROZEN[0]:
        import gc

        gc.freeze()
        _FROZEN[0] = True


def run_pytest(test_files: list[Path], plugins: list[object]) -> str:
    """Run pytest over ``test_files`` in this (trusted) process with ``plugins`` beside the
    grading fixture's; returns what pytest printed, for grader bugs only."""
    # The environment must not reconfigure the trusted run (PYTEST_ADDOPTS, plugin autoload).
    saved = {
        k: os.environ.get(k) for k in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    }
    os.environ.pop("PYTEST_ADDOPTS", None)
    os.environ.pop("PYTEST_PLUGINS", None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    import pytest
    from hypothesis import configuration

    from course.engine.grading import plugin  # holds the `lesson` fixture

    _freeze_what_is_loaded()

    # pytest (importlib mode) reuses a loaded module of the same name: a test file of the same
    # name elsewhere (the pristine copy, a maintainer's copy) must not be served from the cache.
    for test_file in test_files:
        cached = sys.modules.get(test_file.stem)
        loaded = Path(getattr(cached, "__file__", "") or "")
        if cached is not None and loaded.resolve() != test_file.resolve():
            del sys.modules[test_file.stem]

    # Nothing of the grader's may land in the learner's folder, nor in one learner code could
    # write (the worker's scratch folder, where a symlink could send the grader's writes
    # anywhere): pytest runs from a folder of the grader's own, made here and removed after,
    # where hypothesis's own cache (written even without a database) goes too.
    import shutil
    import tempfile

    here = os.getcwd()
    own = Path(tempfile.mkdtemp(prefix="course-grader-"))
    configuration.set_hypothesis_home_dir(str(own / ".hypothesis"))
    try:
        os.chdir(own)
        printed = io.StringIO()
        with redirect_stdout(printed), redirect_stderr(printed):
            code = pytest.main(_pytest_args(test_files), plugins=[*plugins, plugin])
        if code == pytest.ExitCode.INTERRUPTED:
            # pytest turns a ^C into an exit code; the caller (course watch, a check) must stop.
            # Learner code runs in the worker, so only a signal to this process gets here.
            raise KeyboardInterrupt
        return f"pytest exit code {int(code)}. {printed.getvalue()[-1500:]}"
    finally:
        os.chdir(here)
        shutil.rmtree(own, ignore_errors=True)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def grade(
    lesson: Lesson,
    source_dir: Path | str,
    limits: Limits | None = None,
    test_file: Path | None = None,
    spare: tuple[Worker, Path] | None = None,
    sealed: bool = False,
    examples: tuple[Path, str] | None = None,
) -> LessonResult:
    """Grade ``source_dir/<lesson.module>.py`` with the lesson's grading tests.

    ``spare`` is a blank worker (and its scratch folder) started ahead of time by the warm
    grader; without it a worker is started here, in parallel with pytest's start-up.
    ``sealed`` (a class's submission): the learner's code may read nothing but Python, its
    libraries and ``source_dir`` (``landlock.readable_paths``): no reference solution, no
    grading test, no other submission. ``examples``: a file where the examples of passing
    property checks are kept between processes, and the course build's fingerprint it is keyed
    by (``kept_examples``; the learner's own checks only).
    """
    from course.engine.grading.plugin import GradingPlugin
    from course.engine.grading.replay import Replayer

    started = time.monotonic()
    source_dir = Path(source_dir).resolve()
    refused = ungradable(lesson, source_dir)
    if refused is not None:
        if spare:
            spare[0].kill()
        return refused
    readable = landlock.readable_paths(source_dir) if sealed else None
    learner = learner_module.LearnerModule(source_dir, lesson.module, limits, spare, readable=readable)
    plugin = GradingPlugin(learner)
    tests = (
        integrity.trusted(lesson.grading_tests)
        if test_file is None
        else integrity.TrustedTests(test_file, [])
    )
    try:
        kept = kept_examples.adopt(tests.test_file, examples) if examples else None
        printed = run_pytest([tests.test_file], [plugin, Replayer(learner)])
        result = assemble(lesson, plugin, printed)
        if kept is not None:
            kept.keep_new()
        result.output = learner.output()
        result.learner_seconds = learner.call_seconds
    finally:
        learner.close()
        tests.cleanup()
    return finish(result, lesson, source_dir, tests.modified, started)


def ungradable(lesson: Lesson, source_dir: Path) -> LessonResult | None:
    """The result of a lesson file that is not graded at all (missing, or too large), or None."""
    if not (source_dir / lesson.file_name).is_file():
        return missing_file_result(lesson, source_dir)
    return oversized_file_result(lesson, source_dir)


def finish(
    result: LessonResult, lesson: Lesson, source_dir: Path, modified: list[str], started: float
) -> LessonResult:
    """A graded lesson's result with its named misconceptions, the notices about the
    learner's folder and the course's tests (``modified``: grading files found changed), and
    its duration since ``started``."""
    misconceptions.label(result)
    notices = [
        encoding_notice(source_dir / lesson.file_name),
        ignored_files_notice(lesson, source_dir),
        learner_imports.outside_notice(
            source_dir / lesson.file_name, learner_module.lesson_modules(lesson.module)
        ),
    ]
    if secret.in_use():
        notices.append(SECRET_NOTICE)
    if modified:
        notices.append(
            f"The course's grading tests were modified on this machine "
            f"({', '.join(modified[:3])}); this check used the pristine copy "
            "that ships with the course."
        )
    result.notice = " ".join(notice for notice in notices if notice)
    result.duration = time.monotonic() - started
    return result
