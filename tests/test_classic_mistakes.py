"""Every classic mistake in tests/mistakes/ fails its lesson, with a message that names it.

tests/mistakes/<lesson>.toml lists a lesson's classic mistakes as data: each is a name, the
words the failure messages must contain (`expect`, case-insensitive), and the edits that turn
the lesson's solution into the mistaken version (each `old` occurs exactly once).

The mistakes are graded in this process (tests.helpers.grade_folder: the same nested pytest and
worker process a cold check uses); one test grades through `python -m course.engine` as well and
checks that both give the same result. A mistake tied to a misconception of the registry
(`misconception = "<id>"`) must label its failing checks with exactly that id and its fix idea
(tests/test_misconceptions.py checks the registry side).

The mistakes of lessons 2 and 3 are graded, and held to the same assertions
(tests.helpers.fails_naming_the_mistake), in tests/test_replay.py, which grades each of them
twice already (replayed, and by hypothesis, the same grade).
"""

from __future__ import annotations

import json

import pytest

from course.content.catalog import load_catalog
from tests.helpers import (
    REPLAYED_LESSONS,
    SOLUTIONS,
    classic_mistakes,
    fails_naming_the_mistake,
    grade_folder,
    grade_folder_cold,
    mistaken_source,
    solutions_with,
)

CASES = classic_mistakes()


def test_every_available_lesson_has_classic_mistakes():
    lessons = {module for module, _ in CASES}
    assert {lesson.module for lesson in load_catalog().available()} <= lessons
    assert set(REPLAYED_LESSONS) <= lessons  # their mistakes are graded in tests/test_replay.py


def test_mistake_names_are_unique_within_a_lesson():
    names = [(module, mistake["name"]) for module, mistake in CASES]
    assert len(names) == len(set(names))


# Lessons 2 and 3: tests/test_replay.py grades each of their classic mistakes (replayed and by
# hypothesis, the same grade) and checks it with `fails_naming_the_mistake` there.
GRADED_HERE = [(module, mistake) for module, mistake in CASES if module not in REPLAYED_LESSONS]


@pytest.mark.parametrize(
    "module, mistake", GRADED_HERE, ids=[f"{module}/{mistake['name']}" for module, mistake in GRADED_HERE]
)
def test_classic_mistake_fails_with_a_message_that_names_it(module, mistake, tmp_path):
    folder = solutions_with(tmp_path, module, mistaken_source(module, mistake))
    fails_naming_the_mistake(module, mistake, grade_folder(folder, module))


def test_the_engine_command_grades_as_in_process_grading_does(tmp_path):
    """`python -m course.engine DIR LESSON` in a fresh process: JSON on stdout, exit 1 for a
    mistake and 0 for the solution, and the same result as grading in this process."""
    module, mistake = next(case for case in CASES if case[0] == "l03_attention")
    folder = solutions_with(tmp_path, module, mistaken_source(module, mistake))
    cold = grade_folder_cold(folder, module)
    assert cold.returncode == 1, cold.stderr[-2000:]
    printed = json.loads(cold.stdout)
    here = grade_folder(folder, module)
    assert printed["status"] == here["status"] != "passed"
    timings = {"duration": 0, "learner_seconds": 0}
    assert {**printed, **timings} == {**here, **timings}
    passed = grade_folder_cold(SOLUTIONS, "l01_projections")
    assert passed.returncode == 0 and json.loads(passed.stdout)["status"] == "passed", passed.stderr
    unknown = grade_folder_cold(SOLUTIONS, "no_such_lesson")
    assert unknown.returncode == 2 and unknown.stdout == ""
