"""Grading results as plain data: what the engine returns and what ``--json`` prints.

Statuses are strings so that JSON and the state file need no translation. A lesson passes when
every check passes; a check that could not run still has a status and a message saying why.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass, field

from course.engine.calls import upstream

PASSED = "passed"
FAILED = "failed"
NOT_STARTED = "not-started"
ERROR = "error"
TIMEOUT = "timeout"
STATUSES = (PASSED, FAILED, NOT_STARTED, ERROR, TIMEOUT)

# What kind of case a check is (data set by the grading test's markers, never read from its
# name or message): a small case worked out by hand explains a failure best, a property tried
# on generated inputs least. The order is the order failures are shown in.
HAND_CHECKED = "hand-checked"
EXAMPLE = "example"  # fixed inputs, often random numbers of a fixed seed
PROPERTY = "property"  # generated inputs (hypothesis)
KINDS = (HAND_CHECKED, EXAMPLE, PROPERTY)


NAMING = "This looks like a known mistake: {}."
"""The line a check's message gets when it names a classic mistake (given its sentence)."""


@dataclass
class CheckResult:
    name: str
    status: str
    message: str = ""
    mistake: str = ""  # set when the answer reproduces a named classic mistake: its sentence
    misconception: str = ""  # the id of the named misconception that mistake shows
    mistake_id: str = ""  # the id of that classic mistake (data; ``mistake`` is for people)
    kind: str = EXAMPLE  # one of KINDS: how telling a failure of this check is
    raised_in: str = ""  # the earlier lesson module the learner's error was raised in ...
    call_line: int = 0  # ... called from this line of this lesson's file
    title: str = ""  # what the check checks, for people (its test's docstring), else ""
    naming: str = ""  # the end of ``message`` that names the mistake and its misconception
    blamed: str = ""  # a function this check's exercise uses that fails: "name" or "module.name"

    def name_mistake(self, text: str) -> None:
        """Add ``text`` about the named mistake to the message (kept apart for ``blame``)."""
        self.message += text
        self.naming += text

    def blame(self, function: str, sentence: str) -> None:
        """The cause lies in ``function``, which this check's exercise uses and which fails:
        ``sentence`` says so, in place of any mistake named for this exercise."""
        if self.naming and self.message.endswith(self.naming):
            self.message = self.message[: -len(self.naming)]
        self.naming = self.mistake = self.mistake_id = self.misconception = ""
        self.blamed = function
        self.message += f"\n{sentence}"

    def heading(self) -> str:
        """What the check checks, for people: its test's docstring (else its name in words), with
        the case of a parametrised test: ``rows of weights sum to one [float32]``; the first
        line of what `course check` and a notebook's test cell show about a failure."""
        base, _, params = self.name.partition("[")
        words = self.title or base.removeprefix("test_").replace("_", " ")
        return f"{words} [{params}" if params else words

    def rank(self) -> tuple[int, int]:
        """Sort key of a failure: a named mistake first, then by kind (hand-checked first)."""
        return (0 if self.mistake else 1, KINDS.index(self.kind) if self.kind in KINDS else len(KINDS))


@dataclass
class ExerciseResult:
    name: str
    status: str
    checks: list[CheckResult] = field(default_factory=list)


@dataclass
class LessonResult:
    lesson: str
    status: str
    exercises: list[ExerciseResult] = field(default_factory=list)
    message: str = ""  # a lesson-wide problem: file missing, syntax error, whole-run timeout
    note: str = ""  # one line about an earlier lesson this one depends on
    fix_first: str = ""  # an earlier lesson module whose file keeps this one from importing
    output: str = ""  # the tail of what the learner's code printed
    uses: list[str] = field(default_factory=list)  # earlier lesson modules this one imported
    notice: str = ""  # about the grading itself, e.g. modified grading tests were replaced
    untied: list[str] = field(default_factory=list)  # grading tests tied to no known exercise
    duration: float = 0.0
    learner_seconds: float = 0.0  # of ``duration``, spent waiting for the learner's calls

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def repeatable(self) -> bool:
        """Whether another run would give this grade again: no time limit reached, no error of
        the whole lesson (what the result cache and a class's identical files may reuse)."""
        return self.status not in (ERROR, TIMEOUT) and self.counts()[TIMEOUT] == 0

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(STATUSES, 0)
        for exercise in self.exercises:
            for check in exercise.checks:
                counts[check.status] += 1
        return counts

    def problems(self) -> list[tuple[ExerciseResult, CheckResult]]:
        """Every check not passed, exercise by exercise, the most explaining first within an
        exercise: one that names a known mistake, then hand-checked cases, then fixed examples,
        then properties on generated inputs (``CheckResult.rank``); ties keep the file's order."""
        found = []
        for exercise in self.exercises:
            failing = [check for check in exercise.checks if check.status != PASSED]
            found += [(exercise, check) for check in sorted(failing, key=CheckResult.rank)]
        return found

    def first_problem(self) -> tuple[ExerciseResult, CheckResult] | None:
        """What to work on next: the most explaining failure of the first exercise not passed."""
        problems = self.problems()
        return problems[0] if problems else None

    def point_at_callers(self, passing: Collection[str]) -> None:
        """For every check whose error was raised in an earlier lesson that ``passing`` holds
        (lessons known to pass their own checks), say that the bug is at the calling line."""
        for exercise in self.exercises:
            for check in exercise.checks:
                if check.status != PASSED and check.raised_in in passing and check.call_line:
                    check.message += "\n" + upstream.passed_note(
                        check.raised_in, self.lesson, check.call_line
                    )

    def to_dict(self) -> dict:
        data = asdict(self)
        data["duration"] = round(self.duration, 3)
        data["learner_seconds"] = round(self.learner_seconds, 3)
        data["counts"] = self.counts()
        return data

    @classmethod
    def from_dict(cls, data: dict) -> LessonResult:
        """Inverse of ``to_dict`` (the warm grader sends results as JSON)."""
        exercises = [
            ExerciseResult(e["name"], e["status"], [_check(check) for check in e["checks"]])
            for e in data["exercises"]
        ]
        fields = {
            k: data[k]
            for k in (
                "lesson",
                "status",
                "message",
                "note",
                "fix_first",
                "output",
                "uses",
                "notice",
                "untied",
                "duration",
                "learner_seconds",
            )
            if k in data
        }
        return cls(exercises=exercises, **fields)


def _check(data: dict) -> CheckResult:
    """A CheckResult from its JSON, ignoring fields this version does not know."""
    known = {name for name in CheckResult.__dataclass_fields__}
    return CheckResult(**{k: v for k, v in data.items() if k in known})


def combine(statuses: list[str]) -> str:
    """One status for a group of checks (an exercise, or a lesson's exercises)."""
    if not statuses:
        return ERROR
    if all(s == PASSED for s in statuses):
        return PASSED
    if all(s == NOT_STARTED for s in statuses):
        return NOT_STARTED
    if any(s == TIMEOUT for s in statuses):
        return TIMEOUT
    if all(s in (ERROR, NOT_STARTED) for s in statuses) and ERROR in statuses:
        return ERROR
    return FAILED


def lesson_status(exercise_statuses: list[str]) -> str:
    """A lesson is passed, not started, errored (nothing could run) or failed."""
    status = combine(exercise_statuses)
    return FAILED if status == TIMEOUT else status
