"""Property checks replayed (course/engine/grading/replay.py): the same grade as hypothesis, for less.

A passing property check records the examples hypothesis drew; later grades in the process call
the test body with them directly. These tests hold that a replayed grade is the grade hypothesis
gives: for the solution, for every classic mistake of lessons 2 and 3 (their property checks
fail on some examples and pass on others) and for code that times out on one example only.
Each of those mistakes must also fail with a message that names it, as tests/test_classic_mistakes.py
holds for the other lessons' mistakes (tests.helpers.fails_naming_the_mistake).
"""

from __future__ import annotations

import sys

import pytest

from course.engine.grading import replay
from tests.helpers import (
    REPLAYED_LESSONS,
    SOLUTIONS,
    classic_mistakes,
    fails_naming_the_mistake,
    grade_folder,
    mistaken_source,
    solutions_with,
)

LESSONS = REPLAYED_LESSONS
CASES = [(module, mistake) for module, mistake in classic_mistakes() if module in LESSONS]


def solution(module: str) -> str:
    return (SOLUTIONS / f"{module}.py").read_text()


def comparable(result: dict) -> dict:
    """A result without what differs from run to run (timings, the learner's printed output)."""
    result = dict(result)
    for key in ("duration", "learner_seconds", "output"):
        result.pop(key, None)
    return result


def graded_both_ways(folder, module: str) -> tuple[dict, dict]:
    """(with the recordings this process holds, with none: hypothesis runs every property check)."""
    replayed = grade_folder(folder, module)
    saved = dict(replay.RECORDED)
    replay.RECORDED.clear()
    try:
        by_hypothesis = grade_folder(folder, module)
    finally:
        replay.RECORDED.clear()
        replay.RECORDED.update(saved)
    return comparable(replayed), comparable(by_hypothesis)


@pytest.fixture(scope="module", autouse=True)
def recordings(tmp_path_factory):
    """Each lesson's solution graded once, so that its property checks are recorded."""
    for module in LESSONS:
        folder = solutions_with(tmp_path_factory.mktemp(module), module, solution(module))
        assert grade_folder(folder, module)["status"] == "passed"


@pytest.mark.parametrize("module", LESSONS)
def test_a_passing_lesson_replays_every_property_check_and_gets_the_same_grade(module, tmp_path):
    folder = solutions_with(tmp_path, module, solution(module))
    before = dict(replay.COUNTS)
    replayed, by_hypothesis = graded_both_ways(folder, module)
    properties = sum(
        1 for exercise in replayed["exercises"] for check in exercise["checks"] if check["kind"] == "property"
    )
    assert properties >= 4
    assert replay.COUNTS["replayed"] - before["replayed"] == properties
    assert replayed == by_hypothesis


@pytest.mark.parametrize("module, mistake", CASES, ids=[f"{m}/{x['name']}" for m, x in CASES])
def test_a_classic_mistake_gets_the_same_grade_replayed_as_from_hypothesis(module, mistake, tmp_path):
    folder = solutions_with(tmp_path, module, mistaken_source(module, mistake))
    replayed, by_hypothesis = graded_both_ways(folder, module)
    assert replayed["status"] != "passed"
    assert replayed == by_hypothesis
    # what tests/test_classic_mistakes.py asserts of the other lessons' mistakes
    fails_naming_the_mistake(module, mistake, by_hypothesis)


def test_code_that_hangs_on_one_generated_example_gets_the_same_grade_replayed(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_LIMITS", "call=1")
    source = solution("l02_softmax").replace(
        "def softmax(x, axis=-1):\n",
        # (3, 1, 4): drawn by one property check only, never by a hand-written one
        "def softmax(x, axis=-1):\n    while x.shape == (3, 1, 4):\n        pass\n",
        1,
    )
    assert "while x.shape" in source
    folder = solutions_with(tmp_path, "l02_softmax", source)
    before = dict(replay.COUNTS)
    replayed, by_hypothesis = graded_both_ways(folder, "l02_softmax")
    assert replay.COUNTS["handed_back"] > before["handed_back"]
    assert replayed["status"] == by_hypothesis["status"] != "passed"
    assert replayed == by_hypothesis


def drawn_by_the_grading_profile() -> list[int]:
    """200 integers as a property check of the grading profile draws them (the fixed seed)."""
    from hypothesis import given, seed, settings
    from hypothesis import strategies as st

    from course.engine.testing.compare import GRADING_SEED

    values: list[int] = []

    @seed(GRADING_SEED)
    @settings(settings.get_profile("grading"), max_examples=200)
    @given(st.integers(0, 2**32 - 1))
    def draw(value):
        values.append(value)

    draw()
    return values


def test_the_examples_drawn_do_not_depend_on_the_modules_loaded_in_the_grading_process(tmp_path, monkeypatch):
    """Hypothesis would mix constants read from the source of loaded "local" modules into its
    draws (so a clone and a wheel, or a cold and a warm grader, could grade other examples)."""
    import course.engine.testing.compare  # noqa: F401 - what every grade imports first

    before = drawn_by_the_grading_profile()
    planted = tmp_path / "planted" / "course_planted_constants.py"
    planted.parent.mkdir()
    numbers = ", ".join(str(n) for n in range(1_000_003, 4_000_000_000, 7_654_321))
    planted.write_text(f"NUMBERS = [{numbers}]\n")
    monkeypatch.syspath_prepend(str(planted.parent))
    monkeypatch.delitem(sys.modules, "course_planted_constants", raising=False)
    __import__("course_planted_constants")
    after = drawn_by_the_grading_profile()
    assert len(set(before)) > 100
    assert after == before
