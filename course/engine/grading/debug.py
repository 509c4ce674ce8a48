"""``course check LESSON --debug``: the lesson's tests with the learner's module imported right
here, so that print, breakpoint() and pdb work. It is NOT a grade: learner code runs inside the
test process (which the real check never allows), pytest reports in its own words, and nothing
is recorded.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from course.content.catalog import Lesson
from course.engine.calls import errors, measured

BANNER = (
    "DEBUG RUN, NOT A GRADE: your code runs inside the test process, print() and "
    "breakpoint() work, nothing is recorded. `course check` without --debug grades."
)


class InProcessModule:
    """The ``lesson`` fixture of a debug run: calls the learner's functions directly."""

    def __init__(self, source_dir: Path, module: str) -> None:
        self.module = module
        self.mutated: list[str] = []
        self.not_again: dict = {}  # as LearnerModule's (a call here cannot time out)
        sys.path.insert(0, str(source_dir))
        self._module = importlib.import_module(module)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        function = getattr(self._module, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            arrays = [(f"argument {i + 1}", a) for i, a in enumerate(args)] + list(kwargs.items())
            before = [(label, a.copy()) for label, a in arrays if isinstance(a, np.ndarray)]
            try:
                return function(*args, **kwargs)
            except NotImplementedError as exc:
                raise errors.NotStarted(f"{name} still raises NotImplementedError.") from exc
            finally:
                current = dict(arrays)
                self.mutated = [
                    label for label, old in before if not np.array_equal(current[label], old, equal_nan=True)
                ]

        return call

    def measure(self, name: str, *args: Any, **kwargs: Any) -> measured.Measurement:
        """A rough stand-in for the grader's measurement (Python's own allocations, counted by
        tracemalloc in this process): a debug run grades nothing."""
        import time
        import tracemalloc

        tracemalloc.start()
        start = time.monotonic()
        try:
            result = getattr(self, name)(*args, **kwargs)
            return measured.Measurement(result, tracemalloc.get_traced_memory()[1], time.monotonic() - start)
        finally:
            tracemalloc.stop()


def run(lesson: Lesson, source_dir: Path, extra: list[str] | None = None) -> int:
    """pytest's own run of the lesson's tests, in this process. Returns 0 only when every test
    ran and passed, as `course check` would pass the lesson (where a skipped test counts as not
    passed): else pytest's exit code, or 1. A lesson file that cannot be imported (a syntax
    error, an exception, even ``sys.exit(0)``) gets its own error, its own frames only, and 1."""
    import pytest

    from course.engine.grading import plugin
    from course.engine.grading.runner import TRUSTED_INI
    from course.engine.testing import compare

    class DebugPlugin:
        skipped = 0

        def pytest_configure(self, config: pytest.Config) -> None:
            config.stash[plugin.LEARNER] = learner
            config.addinivalue_line("markers", "exercise(name): the exercise a test grades")
            config.addinivalue_line("markers", "hand_checked: a case worked out by hand")
            if compare.settings is not None:
                compare.settings.load_profile("grading")

        def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
            self.skipped += report.skipped

    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.environ.pop("PYTEST_ADDOPTS", None)
    print(BANNER, flush=True)
    folder = Path(source_dir).resolve()
    try:
        learner = InProcessModule(folder, lesson.module)
    except KeyboardInterrupt:
        raise
    except BaseException as problem:  # SystemExit and pytest's outcomes included: the file's own
        print(import_failure(lesson, problem, folder), end="", flush=True)
        return 1
    test_file = lesson.grading_tests
    args = [
        str(test_file),
        "-c",
        str(TRUSTED_INI),
        "--rootdir",
        str(test_file.parent),
        "--import-mode=importlib",
        "-p",
        "no:cacheprovider",
        "-s",
        "-x",
        "--tb=short",
        "-q",
        *(extra or []),
    ]
    debugging = DebugPlugin()
    code = int(pytest.main(args, plugins=[debugging, plugin]))
    if code == 0 and debugging.skipped:
        print(f"{debugging.skipped} skipped: a skipped check counts as not passed.", flush=True)
        return 1
    return code


def import_failure(lesson: Lesson, problem: BaseException, folder: Path) -> str:
    """Why the learner's lesson file could not be imported: the frames in the learner's files
    (none of the course's import machinery) and the error itself."""
    frames = [
        frame
        for frame in traceback.extract_tb(problem.__traceback__)
        if Path(frame.filename).parent == folder
    ]
    return "".join(
        [
            f"Your {lesson.file_name} could not be imported:\n",
            *traceback.format_list(frames),
            *traceback.format_exception_only(type(problem), problem),
        ]
    )
