"""The calls a grade makes to learner code, heard on the grader's side, with and without an
instructor's secret: what tests/test_grading_secret.py and tools/secret_inputs.py measure.

A call is known by ``values.call_digest`` (its function and the exact inputs the worker gets), so
"a call equal to a public one" means learner code was handed the same inputs as in a public grade.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course.engine.calls import learner_module
from course.engine.testing import secret
from course.engine.wire.values import call_digest
from tests.helpers import grade_folder


@dataclass(frozen=True)
class Heard:
    check: str  # the check's name within its test file ("TestX::test_y")
    function: str
    digest: str
    outcome: Any  # the call's result, or the exception it raised


@contextlib.contextmanager
def grading_secret(value: str | None) -> Iterator[None]:
    """Grade with ``value`` as the instructor's secret (None: public) while this lasts."""
    secret.use(value)
    try:
        yield
    finally:
        secret.use(None)


@contextlib.contextmanager
def heard_calls() -> Iterator[list[Heard]]:
    """Every call the grader makes to learner code in this process while this lasts."""
    heard: list[Heard] = []

    def listen(name: str, args: tuple, kwargs: dict, outcome: Any) -> None:
        current = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
        check = current.split("::", 1)[-1]
        heard.append(Heard(check, name, call_digest(name, args, kwargs), outcome))

    learner_module.LISTENERS.append(listen)
    try:
        yield heard
    finally:
        learner_module.LISTENERS.remove(listen)


def graded_and_heard(folder: Path, module: str, value: str | None = None) -> tuple[dict, list[Heard]]:
    """Grade ``folder`` as ``module`` (with the secret ``value``, if any): the result and the
    calls heard."""
    with grading_secret(value), heard_calls() as heard:
        result = grade_folder(folder, module)
    return result, heard


def equal_to_public(public: list[Heard], under_secret: list[Heard]) -> list[Heard]:
    """The calls made under a secret that hand learner code the inputs of a public call."""
    seen = {call.digest for call in public}
    return [call for call in under_secret if call.digest in seen]


def enumerable_checks(module: str) -> dict[str, str]:
    """The checks of ``module``'s grading tests marked ``@enumerable(why)``: name -> why."""
    return {name: why for name, (why, _) in _enumerable(module).items()}


def enumerable_table() -> str:
    """The docs' list of the checks marked ``@enumerable``, lesson by lesson, with their points
    (one per check): what a memorising file can still pass under a secret."""
    from course.content.catalog import load_catalog

    lines = ["| Lesson | Check | Points | Why its inputs stay the same |", "| --- | --- | --- | --- |"]
    total = 0
    for lesson in load_catalog().available():
        for _, (why, title) in sorted(_enumerable(lesson.module).items()):
            lines.append(f"| {lesson.id} | {title} | 1 | {why} |")
            total += 1
    lines.append(f"| all | | {total} | |")
    return "\n".join(lines) + "\n"


def _enumerable(module: str) -> dict[str, tuple[str, str]]:
    """name -> (why, title) of the checks of ``module`` marked ``@enumerable``."""
    import importlib.util

    from course.content.catalog import load_catalog

    path = load_catalog().resolve(module).grading_tests
    spec = importlib.util.spec_from_file_location(f"_enumerable_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    found: dict[str, tuple[str, str]] = {}
    for name, value in vars(loaded).items():
        members = vars(value).items() if isinstance(value, type) else [(name, value)]
        for member_name, member in members:
            if not member_name.startswith("test_"):
                continue
            for mark in [*getattr(member, "pytestmark", []), *getattr(value, "pytestmark", [])]:
                if mark.name == "enumerable":
                    check = f"{name}::{member_name}" if isinstance(value, type) else member_name
                    title = ((member.__doc__ or "").strip().splitlines() or [member_name])[0].strip()
                    found[check] = (str(mark.args[0]) if mark.args else "", title)
    return found


def failed_checks(result: dict) -> list[str]:
    """The titles of the checks of a grade's result that did not pass, with what they say."""
    return [
        f"{check.get('title') or check['name']}: {check.get('message', '')[:600]}"
        for exercise in result["exercises"]
        for check in exercise["checks"]
        if check["status"] != "passed"
    ]


def correct_implementations(module: str) -> list[tuple[str, str]]:
    """(label, source) of every correct implementation of ``module`` the project holds: the
    reference solution, the solution with each of its code hints in place (``course dev check``
    grades these), and each blind mistake marked harmless (tests/uncatalogued/)."""
    from course.content.catalog import load_catalog
    from course.devcheck.grading import with_code
    from tests.helpers import SOLUTIONS, UNCATALOGUED, classic_mistakes, mistaken_source

    source = (SOLUTIONS / f"{module}.py").read_text(encoding="utf-8")
    found = [("solution", source)]
    for exercise in load_catalog().resolve(module).exercises:
        for hint in exercise.code_hints:
            found.append((f"{exercise.name} hint {hint.tier}", with_code(source, hint.replaces, hint.code)))
    for lesson, mistake in classic_mistakes(UNCATALOGUED):
        if lesson == module and "harmless" in mistake:
            found.append((f"harmless {mistake['name']}", mistaken_source(module, mistake)))
    return found


def random_secrets(count: int, seed: int | None = None) -> list[str]:
    """``count`` secrets as an instructor would make them (``secrets.token_urlsafe``), or drawn
    from ``seed`` when given (a run that can be repeated)."""
    import random
    import secrets
    import string

    if seed is None:
        return [secrets.token_urlsafe(24) for _ in range(count)]
    draw = random.Random(seed)
    return ["".join(draw.choices(string.ascii_letters + string.digits, k=32)) for _ in range(count)]


def within_file(check: str) -> str:
    """A check's name without its parameters ("TestX::test_y[case]" -> "TestX::test_y")."""
    return check.split("[", 1)[0]


def memorising_folder(tmp_path: Path, module: str) -> Path:
    """A folder whose ``module`` computes nothing: each function looks its answer up in a table
    of every call of a public grade of the reference solution (the attack an instructor's secret
    stops), next to every other solution."""
    import pickle

    from tests.helpers import SOLUTIONS, solutions_with

    reference = (SOLUTIONS / f"{module}.py").read_text(encoding="utf-8")
    _, heard = graded_and_heard(solutions_with(tmp_path / "recorded", module, reference), module)
    table = {call.digest: call.outcome for call in heard if not isinstance(call.outcome, BaseException)}
    names = sorted({call.function for call in heard})
    source = MEMORISING.replace("NAMES", repr(names))
    folder = solutions_with(tmp_path / "memorised", module, source)
    (folder / "answers.pickle").write_bytes(pickle.dumps(table))
    return folder


MEMORISING = '''"""Answers looked up, never computed: keyed by the exact inputs of a public grade."""
import pickle
from pathlib import Path

from course.engine.wire.values import call_digest

_TABLE = pickle.loads(Path(__file__).with_name("answers.pickle").read_bytes())


def _looked_up(name):
    def function(*args, **kwargs):
        key = call_digest(name, args, kwargs)
        if key not in _TABLE:
            raise NotImplementedError(name)
        return _TABLE[key]

    function.__name__ = name
    return function


for _name in NAMES:
    globals()[_name] = _looked_up(_name)
'''
