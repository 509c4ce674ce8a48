"""Grading results as plain data: what the engine returns and what ``--json`` prints.

Statuses are strings so that JSON and the state file need no translation. A lesson passes when
every check passes; a check that could not run still has a status and a message saying why.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

PASSED = "passed"
FAILED = "failed"
NOT_STARTED = "not-started"
ERROR = "error"
TIMEOUT = "timeout"
STATUSES = (PASSED, FAILED, NOT_STARTED, ERROR, TIMEOUT)


@dataclass
class CheckResult:
    name: str
    status: str
    message: str = ""
    mistake: str = ""  # set when the answer reproduces a named classic mistake: its sentence
    misconception: str = ""  # the id of the named misconception that mistake shows
    mistake_id: str = ""  # the id of that classic mistake (data; ``mistake`` is for people)


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
    output: str = ""  # the tail of what the learner's code printed
    uses: list[str] = field(default_factory=list)  # earlier lesson modules this one imported
    notice: str = ""  # about the grading itself, e.g. modified grading tests were replaced
    untied: list[str] = field(default_factory=list)  # grading tests tied to no known exercise
    duration: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(STATUSES, 0)
        for exercise in self.exercises:
            for check in exercise.checks:
                counts[check.status] += 1
        return counts

    def first_problem(self) -> tuple[ExerciseResult, CheckResult] | None:
        """What to work on next: in the first exercise not passed, a check that names a known
        mistake if there is one (it explains the most), else its first check not passed."""
        for exercise in self.exercises:
            problems = [check for check in exercise.checks if check.status != PASSED]
            if problems:
                named = [check for check in problems if check.mistake]
                return exercise, (named or problems)[0]
        return None

    def to_dict(self) -> dict:
        data = asdict(self)
        data["duration"] = round(self.duration, 3)
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
            for k in ("lesson", "status", "message", "note", "output", "uses", "notice", "untied", "duration")
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
