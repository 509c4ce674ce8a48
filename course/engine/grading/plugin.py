"""The pytest plugin that grades: provides the ``lesson`` fixture and records every check.

Results are collected from the reports' exception objects as structured data, never parsed from
pytest's output or exit code. Every collected test gets a status, including the ones that could
not run because the learner's file does not import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

import pytest

from course.engine.calls import errors, learner_module, replies
from course.engine.results import (
    ERROR,
    EXAMPLE,
    FAILED,
    HAND_CHECKED,
    NOT_STARTED,
    PASSED,
    PROPERTY,
    TIMEOUT,
)
from course.engine.testing import error_shapes, learner_code
from course.engine.wire import messages


@dataclass
class Record:
    exercise: str
    name: str
    title: str = ""  # the check's title for people: its test's docstring, first line
    status: str = ERROR
    message: str = "Not run."
    dependency: str = ""  # an earlier lesson module whose stub this check ran into
    mistake: str = ""  # the named classic mistake the learner's answer reproduces: its sentence
    mistake_id: str = ""  # ... and its id
    misconception: str = ""  # the id of the misconception that mistake shows, if any
    mismatched: str = ""  # a function whose signature did not accept the check's arguments
    kind: str = EXAMPLE  # hand-checked, example or property (results.KINDS), from markers
    raised_in: str = ""  # an earlier lesson module the learner's error was raised in ...
    call_line: int = 0  # ... reached through this line of the graded lesson's file
    shapes: str = ""  # the shapes of a failed numpy call, in dimension letters
    claims: tuple[tuple[str, str], ...] = ()  # the named mistake's (id, sentence) pairs


def _unwrap(exc: BaseException) -> BaseException:
    """The most telling exception inside an exception group (hypothesis may raise one)."""
    if isinstance(exc, BaseExceptionGroup):
        inner = [_unwrap(e) for e in exc.exceptions]
        for kind in (errors.LearnerProblem, AssertionError):
            for candidate in inner:
                if isinstance(candidate, kind):
                    return candidate
        return inner[0] if inner else exc
    return exc


def _learner_error(exc: BaseException) -> errors.LearnerError | None:
    """The learner's error a check ended with, also when a grading test re-raised it in its
    own words (``raise AssertionError(...) from None`` keeps it as the context)."""
    seen: BaseException | None = exc
    for _ in range(3):
        if seen is None or isinstance(seen, errors.LearnerError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def classify(exc: BaseException) -> tuple[str, str]:
    """(status, message) for the exception a check ended with."""
    exc = _unwrap(exc)
    message = str(exc).strip()
    if isinstance(exc, errors.NotStarted):
        return NOT_STARTED, message
    if isinstance(exc, errors.LearnerTimeout):
        return TIMEOUT, message
    if isinstance(exc, errors.LearnerProblem):
        return ERROR, message
    if isinstance(exc, messages.ProtocolError):  # a reply forged on the learner's side
        return ERROR, replies.malformed_reply(exc)
    if isinstance(exc, AssertionError):
        notes = [n for n in getattr(exc, "__notes__", []) if n.startswith("Falsifying example")]
        if notes:
            message += "\n" + notes[0].strip()
        return FAILED, message
    return (
        ERROR,
        f"The grader itself hit a problem ({type(exc).__name__}: {message}). "
        "Please report it; it is not your fault.",
    )


LEARNER = pytest.StashKey[object]()


@pytest.fixture(scope="session")
def lesson(request: pytest.FixtureRequest) -> object:
    """The learner's module as the grading tests call it (a ``learner_module.LearnerModule``, or
    the in-process stand-in of a debug run). Found because this module is registered as a plugin."""
    return request.config.stash[LEARNER]


class GradingPlugin:
    """Registered by the runner with ``pytest.main(plugins=[...])``.

    With a ``learner``, it grades that module in one pytest session (``runner.grade``). Without
    one, the session grades many modules one after another (``one_session``): collection only
    prepares the checks, and ``begin`` starts each module's grade with records of its own."""

    def __init__(self, learner: learner_module.LearnerModule | None) -> None:
        self.learner = learner
        self.records: dict[str, Record] = {}
        self.import_problem: errors.LearnerProblem | None = None
        self.import_report: dict = {}
        self.collection_errors: list[str] = []
        self.blocked: dict[str, errors.LearnerProblem] = {}  # exercise -> why it cannot pass yet
        self.ruled_out: dict[str, set[tuple[str, str]]] = {}  # exercise -> (id, sentence) ruled out
        self._prepared: dict[str, Record] = {}  # node id -> its record before it runs

    def pytest_configure(self, config: pytest.Config) -> None:
        config.stash[LEARNER] = self.learner
        config.addinivalue_line("markers", "exercise(name): the catalog exercise a test grades")
        config.addinivalue_line("markers", "hand_checked: a small case whose answer is worked out by hand")
        config.addinivalue_line(
            "markers", "enumerable(why): inputs the same under a secret, listed in the docs"
        )
        from course.engine.testing import compare  # registers the derandomised "grading" profile

        if compare.settings is not None:
            compare.settings.load_profile("grading")

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collection_errors.append(str(report.longrepr)[-2000:])

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        from hypothesis import seed

        from course.engine.testing import secret
        from course.engine.testing.compare import GRADING_SEED

        grading_seed = secret.hypothesis_seed(GRADING_SEED)
        for item in items:
            function = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
            generated = bool(getattr(function, "is_hypothesis_test", False))
            if function is not None and generated:
                seed(grading_seed)(function)  # the same examples on every run (of a secret)
                # No example database (see profile), so no key: hypothesis would otherwise
                # derive one from the test's source (inspect + tokenize) on every run.
                function._hypothesis_internal_database_key = None
            marker = item.get_closest_marker("exercise")
            exercise = marker.args[0] if marker and marker.args else "?"
            kind = HAND_CHECKED if item.get_closest_marker("hand_checked") else EXAMPLE
            kind = PROPERTY if generated else kind
            doc = (getattr(function, "__doc__", None) or "").strip().splitlines()
            title = doc[0].strip() if doc else ""
            self._prepared[item.nodeid] = Record(exercise=exercise, name=item.name, title=title, kind=kind)
        if self.learner is not None:
            items[:] = self.begin(self.learner, items)

    def begin(self, learner: learner_module.LearnerModule, items: list[pytest.Item]) -> list[pytest.Item]:
        """Start grading ``learner`` with ``items``: fresh records for them, and the module's
        import report; returns the items to run (none when the module does not import)."""
        self.learner = learner
        self.records = {}
        for item in items:
            prepared = self._prepared[item.nodeid]
            self.records[item.nodeid] = Record(
                prepared.exercise, prepared.name, title=prepared.title, kind=prepared.kind
            )
        self.import_problem, self.import_report, self.blocked, self.ruled_out = None, {}, {}, {}
        try:
            self.import_report = learner.import_report()
            if not self.import_report.get("ok"):
                info = self.import_report["error"]
                self.import_problem = errors.ImportFailed(errors.format_learner_error(info), info)
        except errors.LearnerProblem as problem:
            self.import_problem = problem
        if self.import_problem is not None:
            for record in self.records.values():
                record.message = "Not run: your file could not be imported."
            return []
        return items

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Once an exercise is known to be a stub, its remaining checks say so without running
        (a property test would otherwise spend its whole budget on the same NotImplementedError)."""
        from course.engine.testing.compare import take_ruled_out  # loaded with the grading tests

        take_ruled_out()  # what an earlier check left behind is not this check's to claim
        record = self.records.get(item.nodeid)
        if record is not None and record.exercise in self.blocked:
            raise self.blocked[record.exercise]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
        """Record the check and return a lean report: pytest's own would format a full
        traceback for every failure, which costs more than running most checks."""
        # loaded with the grading tests
        from course.engine.testing.compare import Mistake, named_by_code, take_ruled_out

        record = self.records.get(item.nodeid)
        excinfo = call.excinfo
        skipped = excinfo is not None and excinfo.errisinstance(pytest.skip.Exception)
        if record is not None and excinfo is not None:
            record.status, record.message = classify(excinfo.value)
            cause = _unwrap(excinfo.value)
            if isinstance(cause, errors.DependencyNotReady):
                record.dependency = cause.module
            mistake = getattr(cause, "mistake", None)
            if not isinstance(mistake, Mistake) or not mistake.belongs_to(record.exercise):
                mistake = None  # a name given on another exercise's check is no evidence here
            if isinstance(cause, errors.SignatureMismatch):
                record.mismatched = cause.function
            found = _learner_error(cause)
            if found is not None and found.upstream is not None:
                record.raised_in, record.call_line = found.upstream.raised_in, found.upstream.line
            by_code = getattr(getattr(item, "module", None), "CODE_MISTAKES", None)
            if found is not None and by_code and mistake is None and found.kind in error_shapes.SHAPE_ERRORS:
                folder = getattr(self.learner, "source_dir", None)
                mistake = named_by_code(learner_code.around(folder, found.frames), by_code, record.exercise)
            if mistake is not None:  # named in the message by the report, unless ruled out there
                record.mistake, record.mistake_id = mistake.says, mistake.id
                record.misconception = mistake.misconception
                record.claims = mistake.claims()
            if found is not None and found.call is not None and found.kind in error_shapes.SHAPE_ERRORS:
                dims = getattr(getattr(item, "module", None), "DIMS", None)
                record.shapes = error_shapes.in_letters(*found.call, dims) or ""
            if found is not None and found.kind in error_shapes.SHAPE_ERRORS:
                folder = getattr(self.learner, "source_dir", None)
                for name, line, code in learner_code.operand_assignments(folder, found.frames)[:3]:
                    record.message += f"\n`{name}` was made on line {line}: {code}"
            if isinstance(cause, (errors.NotStarted, errors.DependencyNotReady)):
                self.blocked.setdefault(record.exercise, cause)
            if skipped:
                record.status = ERROR
                record.message = "This check was skipped, which counts as not passed."
        elif record is not None and call.when == "call":
            record.status, record.message = PASSED, ""
            self.ruled_out.setdefault(record.exercise, set()).update(take_ruled_out())
        outcome: Literal["passed", "failed", "skipped"] = "passed"
        longrepr: tuple[str, int, str] | str | None = None
        if excinfo is not None and skipped:
            outcome, longrepr = "skipped", (str(item.path), 0, str(excinfo.value))
        elif excinfo is not None:
            outcome, longrepr = "failed", f"{excinfo.typename}: {excinfo.value}"[:2000]
        when = cast(Literal["setup", "call", "teardown"], call.when)
        return pytest.TestReport(
            item.nodeid,
            item.location,
            {},
            outcome,
            longrepr,
            when,
            duration=call.duration,
            start=call.start,
            stop=call.stop,
        )
