"""Shape traces: the shapes at the named points of the learner's computation (projections,
split, attention, concat, output, ...) beside the shapes expected there.

What to run and what to expect belongs to the lesson: its pictures module declares a
``ShapePlan`` (see ``course.engine.pictures``): the sizes of its example by dimension letter (all
different, so a swapped axis shows), the points in the order of the formula with the function
whose result each is and its expected shape in letters, and ``run``, which calls the learner's
code once on that example and returns the calls it recorded (``traced`` records every call the
learner's function makes to their earlier lessons, ``direct`` one call of the lesson's own
function). A shape that is a permutation of the expected one is named as such: "a transpose is
missing or the axes are in the wrong order".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from course.catalog import Lesson
from course.engine import client, pictures

RAISED = ("raised",)  # a recorded call that raised instead of returning


@dataclass(frozen=True)
class ShapeExample:
    """Random arrays of the plan's sizes, named by letters: ``array("B T D")``."""

    sizes: dict[str, int]
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(5))

    def size(self, letter: str) -> int:
        return self.sizes[letter]

    def shape(self, text: str) -> tuple[int, ...]:
        return tuple(self.sizes[letter] for letter in text.split())

    def array(self, text: str) -> np.ndarray:
        return self.rng.standard_normal(self.shape(text))


Call = dict[str, Any]  # {"function": name, "result": [shape, ...]}; no "result": it raised


@dataclass(frozen=True)
class ShapePlan:
    """A lesson's shape trace: ``sizes`` (letter -> size; the first letter of a size names it,
    and the one-letter ones are shown in the title), ``points`` as (point, function, expected
    letters) in the order of the formula ("" repeats the point above), and ``run(module,
    example)`` which calls the learner's code and returns the recorded calls."""

    sizes: dict[str, int]
    points: tuple[tuple[str, str, str], ...]
    run: Callable[[client.LearnerModule, ShapeExample], list[Call]]


@dataclass
class ShapeTrace:
    rows: list[tuple[str, str, str, str, bool]] = field(default_factory=list)
    # (point, function, expected letters, yours, matches)
    mismatch: str = ""  # one sentence about the first mismatch, or ""
    sizes: dict[str, int] = field(default_factory=dict)  # the example's sizes by letter

    def sizes_text(self) -> str:
        """ "B=7 T=3 ...": the example's one-letter sizes, for a title."""
        return " ".join(f"{k}={v}" for k, v in self.sizes.items() if len(k) == 1 and k.isalpha())


def letters(shape: tuple[int, ...] | list[int] | None, sizes: dict[str, int]) -> str:
    """A shape in dimension letters: (7, 4, 3, 6) -> "(B, H, T, K)"."""
    if shape is None:
        return "not an array"
    names: dict[int, str] = {}
    for letter, size in sizes.items():
        names.setdefault(size, letter)
    return "(" + ", ".join(names.get(size, str(size)) for size in shape) + ")"


def traced(module: client.LearnerModule, name: str, *args: Any) -> list[Call]:
    """Run the learner's ``name`` once and return the calls it made to their earlier lessons
    (up to a failure: the calls made before it tell where it went wrong)."""
    try:
        getattr(module, name).traced(*args)
    except client.LearnerProblem:
        pass
    return module.trace


def direct(module: client.LearnerModule, name: str, *args: Any) -> list[Call]:
    """One call of the lesson's own ``name``, recorded with its result's shape."""
    try:
        return [{"function": name, "result": [shape_of(getattr(module, name)(*args))]}]
    except client.LearnerProblem:
        return [{"function": name}]


def shape_of(value: object) -> list[int] | None:
    return list(value.shape) if isinstance(value, np.ndarray) else None


def compare(plan: ShapePlan, calls: list[Call]) -> ShapeTrace:
    """Line up the recorded calls with the expected points, function by function."""
    trace = ShapeTrace(sizes=dict(plan.sizes))
    recorded: dict[str, list[tuple]] = {}
    for call in calls:
        shapes = call["result"] if "result" in call else [RAISED]
        for shape in shapes or [None]:
            value = tuple(shape) if isinstance(shape, (list, tuple)) else ()
            recorded.setdefault(str(call.get("function")), []).append(value)
    unmatched = {name: list(shapes) for name, shapes in recorded.items()}
    for point, function, want in plan.points:
        expected = tuple(plan.sizes[letter] for letter in want.split())
        named = letters(expected, plan.sizes)
        left = unmatched.get(function, [])
        if expected in left:
            left.remove(expected)
            trace.rows.append((point, function, named, named, True))
        elif function not in recorded:
            trace.rows.append((point, function, named, "not called", True))
        elif not left:
            trace.rows.append((point, function, named, "not reached", True))
        elif left[0] == RAISED:
            left.pop(0)
            trace.rows.append((point, function, named, "raised an error", False))
        else:
            yours = left.pop(0)
            shown = letters(yours or None, plan.sizes)
            trace.rows.append((point, function, named, shown, False))
            if not trace.mismatch:
                trace.mismatch = f"{function} gave {shown} where {named} was expected{_why(yours, expected)}"
    return trace


def _why(yours: tuple, expected: tuple) -> str:
    if len(yours) == len(expected) and sorted(yours) == sorted(expected):
        return ": a transpose is missing, or the axes are in the wrong order."
    return "."


def plan_of(lesson: Lesson) -> ShapePlan | None:
    """The lesson's shape plan, or None when it has no shape trace."""
    return pictures.part(lesson, "SHAPES", ShapePlan)


def shape_trace(lesson: Lesson, source_dir: Path) -> ShapeTrace | None:
    """The learner's shape trace (None when the lesson has none, when the learner's function
    cannot be run at all, or when what was recorded is not a trace: see ``client.checked_trace``).
    A picture only: no verdict ever reads it."""
    plan = plan_of(lesson)
    if plan is None:
        return None
    module = client.LearnerModule(source_dir, lesson.module)
    try:
        calls = client.checked_trace(plan.run(module, ShapeExample(dict(plan.sizes))))
    finally:
        module.close()
    return compare(plan, calls) if calls else None
