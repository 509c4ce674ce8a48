"""Shape traces: the shapes at the named points of the learner's computation (projections,
split, attention, concat, output, ...) beside the shapes expected there.

What to run and what to expect belongs to the lesson: its pictures module declares a
``ShapePlan`` (see ``load``): the sizes of its example by dimension letter (all different, so a
swapped axis shows), the points in the order of the formula with the function whose result each
is and its expected shape in letters, and ``run``, which calls the learner's code once on that
example and returns the calls it recorded (``traced`` records every call the learner's function
makes to their earlier lessons, ``direct`` one call of the lesson's own function). A shape that
is a permutation of the expected one is named as such: "a transpose is missing or the axes are
in the wrong order".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from course.content.catalog import Lesson
from course.engine.calls import errors, learner_module, replies
from course.engine.pictures import load

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
    run: Callable[[learner_module.LearnerModule, ShapeExample], list[Call]]


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
    """A shape in dimension letters, (7, 4, 3, 6) -> "(B, H, T, K)": a size shows as its letter
    when exactly one letter has it, else as its number."""
    if shape is None:
        return "not an array"
    named = _letters_by_size(sizes)
    return "(" + ", ".join(_one(named, size) for size in shape) + ")"


def _letters_by_size(sizes: dict[str, int]) -> dict[int, list[str]]:
    named: dict[int, list[str]] = {}
    for letter, size in sizes.items():
        named.setdefault(size, []).append(letter)
    return named


def _one(named: dict[int, list[str]], size: int) -> str:
    return named[size][0] if len(named.get(size, [])) == 1 else str(size)


def read_back(shape: tuple, want: tuple[str, ...], inputs: frozenset[int], sizes: dict[str, int]) -> str:
    """A wrong shape in letters where they say what the axis is, else in numbers. An axis of
    the expected size takes the expected letter; another takes a letter only when exactly one
    letter has its size, that size was in the call's inputs or is expected here, and (unless the
    shape is a permutation of the expected one) the letter names no other axis: a size the call
    made up (4 heads of 3 where K = 6 was expected) is not read as T = 3, nor 4 cached keys as H."""
    if not shape:
        return "not an array"
    named = _letters_by_size(sizes)
    expected = [sizes[letter] for letter in want]
    seen = inputs | set(expected)
    placed = {want[axis] for axis, size in enumerate(shape[: len(want)]) if size == expected[axis]}
    parts = []
    for axis, size in enumerate(shape):
        letter = _one(named, size) if size in seen else str(size)
        if axis < len(want) and size == expected[axis]:
            parts.append(want[axis])
        elif letter in placed and sorted(shape) != sorted(expected):
            parts.append(str(size))  # (B, H, 4, K), not (B, H, H, K): 4 keys are not H
        else:
            parts.append(letter)
    return "(" + ", ".join(parts) + ")"


def traced(module: learner_module.LearnerModule, name: str, *args: Any) -> list[Call]:
    """Run the learner's ``name`` once and return the calls it made to their earlier lessons
    (up to a failure: the calls made before it tell where it went wrong)."""
    try:
        getattr(module, name).traced(*args)
    except errors.LearnerProblem:
        pass
    return module.trace


def direct(module: learner_module.LearnerModule, name: str, *args: Any) -> list[Call]:
    """One call of the lesson's own ``name``, recorded with its arguments' and result's shapes."""
    inputs = [shape_of(arg) for arg in args]
    try:
        result = getattr(module, name)(*args)
    except errors.LearnerProblem:
        return [{"function": name, "args": inputs}]
    return [{"function": name, "args": inputs, "result": [shape_of(result)]}]


def shape_of(value: object) -> list[int] | None:
    return list(value.shape) if isinstance(value, np.ndarray) else None


@dataclass(frozen=True)
class _Result:
    """One result of a recorded call: its shape (() when not an array, RAISED when the call
    raised) and the sizes of the call's input arrays."""

    shape: tuple
    inputs: frozenset[int]


def _results(calls: list[Call]) -> dict[str, list[_Result]]:
    """The recorded results by function, in call order (a call's results in their order)."""
    recorded: dict[str, list[_Result]] = {}
    for call in calls:
        inputs = frozenset(
            size for shape in call.get("args") or [] if isinstance(shape, list) for size in shape
        )
        shapes = call["result"] if "result" in call else [RAISED]
        for shape in shapes or [None]:
            value = tuple(shape) if isinstance(shape, (list, tuple)) else ()
            recorded.setdefault(str(call.get("function")), []).append(_Result(value, inputs))
    return recorded


def _subjects(plan: ShapePlan) -> list[str]:
    """What each point's row is about, for the sentence under the table: "k after projection"
    from the point "q, k, v after projection" and the two rows under it, "after split, 2 of 3"
    where the point names no variable per row."""
    groups: list[list[str]] = []
    for point, _, _ in plan.points:
        if point or not groups:
            groups.append([point])
        else:
            groups[-1].append(point)
    subjects = []
    for group in groups:
        label, count = group[0], len(group)
        listed = _LISTED.fullmatch(label)
        names = listed.group(1).split(", ") if listed else []
        for row in range(count):
            if len(names) == count and listed:
                subjects.append(f"{names[row]} {listed.group(2)}")
            else:
                subjects.append(label if count == 1 else f"{label}, {row + 1} of {count}")
    return subjects


_LISTED = re.compile(r"(\w+(?:, \w+)+) (.+)")


def compare(plan: ShapePlan, calls: list[Call]) -> ShapeTrace:
    """Line up the recorded calls with the expected points by function and call order: the
    n-th point of a function is its n-th recorded result. Only when a function's results so far
    are all right in another order (v projected before k) are they taken as they come."""
    trace = ShapeTrace(sizes=dict(plan.sizes))
    recorded = _results(calls)
    wanted: dict[str, list[tuple]] = {}
    for _, function, want in plan.points:
        wanted.setdefault(function, []).append(tuple(plan.sizes[letter] for letter in want.split()))
    reordered: dict[str, int] = {}  # function -> how many of its results are right, reordered
    for function, shapes in wanted.items():
        got = [r.shape for r in recorded.get(function, [])[: len(shapes)]]
        if Counter(got) == Counter(shapes[: len(got)]):
            reordered[function] = len(got)
    used: dict[str, int] = {}
    for (point, function, want), subject in zip(plan.points, _subjects(plan), strict=True):
        expected = tuple(plan.sizes[letter] for letter in want.split())
        named = "(" + ", ".join(want.split()) + ")"
        index = used[function] = used.get(function, -1) + 1
        results = recorded.get(function, [])
        if index < reordered.get(function, 0):
            trace.rows.append((point, function, named, named, True))
        elif function not in recorded:
            trace.rows.append((point, function, named, "not called", True))
        elif index >= len(results):
            trace.rows.append((point, function, named, "not reached", True))
        elif results[index].shape == RAISED:
            trace.rows.append((point, function, named, "raised an error", False))
        elif results[index].shape == expected:
            trace.rows.append((point, function, named, named, True))
        else:
            yours = results[index]
            shown = read_back(yours.shape, tuple(want.split()), yours.inputs, plan.sizes)
            trace.rows.append((point, function, named, shown, False))
            if not trace.mismatch:
                trace.mismatch = (
                    f"{function} gave {shown} where {named} was expected ({subject})"
                    f"{_why(yours.shape, expected)}"
                )
    return trace


def _why(yours: tuple, expected: tuple) -> str:
    if len(yours) == len(expected) and sorted(yours) == sorted(expected):
        return ": a transpose is missing, or the axes are in the wrong order."
    return "."


def plan_of(lesson: Lesson) -> ShapePlan | None:
    """The lesson's shape plan, or None when it has no shape trace."""
    return load.part(lesson, "SHAPES", ShapePlan)


def shape_trace(lesson: Lesson, source_dir: Path) -> ShapeTrace | None:
    """The learner's shape trace (None when the lesson has none, when the learner's function
    cannot be run at all, or when what was recorded is not a trace: see ``replies.checked_trace``).
    A picture only: no verdict ever reads it."""
    plan = plan_of(lesson)
    if plan is None:
        return None
    module = learner_module.LearnerModule(source_dir, lesson.module)
    try:
        calls = replies.checked_trace(plan.run(module, ShapeExample(dict(plan.sizes))))
    finally:
        module.close()
    return compare(plan, calls) if calls else None
