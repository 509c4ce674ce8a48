"""Every classic mistake in tests/mistakes/ fails its lesson, with a message that names it.

tests/mistakes/<lesson>.toml lists a lesson's classic mistakes as data: each is a name, the
words the failure messages must contain (`expect`, case-insensitive), and the edits that turn
the lesson's solution into the mistaken version (each `old` occurs exactly once).

The mistakes are graded in this process (tests.helpers.grade_folder: the same nested pytest and
worker process a cold check uses); one test grades through `python -m course.engine` as well and
checks that both give the same result. A mistake tied to a misconception of the registry
(`misconception = "<id>"`) must label its failing checks with exactly that id and its fix idea
(tests/test_misconceptions.py checks the registry side).
"""

from __future__ import annotations

import json

import pytest

from course.content.catalog import load_catalog
from course.engine.testing import misconceptions
from tests.helpers import (
    SOLUTIONS,
    all_messages,
    classic_mistakes,
    grade_folder,
    grade_folder_cold,
    mistaken_source,
    solutions_with,
)

CASES = classic_mistakes()


def test_every_available_lesson_has_classic_mistakes():
    lessons = {module for module, _ in CASES}
    assert {lesson.module for lesson in load_catalog().available()} <= lessons


def test_mistake_names_are_unique_within_a_lesson():
    names = [(module, mistake["name"]) for module, mistake in CASES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    "module, mistake", CASES, ids=[f"{module}/{mistake['name']}" for module, mistake in CASES]
)
def test_classic_mistake_fails_with_a_message_that_names_it(module, mistake, tmp_path):
    folder = solutions_with(tmp_path, module, mistaken_source(module, mistake))
    result = grade_folder(folder, module)
    assert result["status"] != "passed", f"{mistake['name']} passed lesson {module}"
    messages = " ".join(all_messages(result).split())
    assert mistake["expect"].lower() in messages.lower(), (
        f"no failure message of {module} mentions {mistake['expect']!r}:\n{messages[:3000]}"
    )
    if "misconception" in mistake:  # tied to the registry: labelled with exactly that id
        entry = misconceptions.find(mistake["misconception"])
        assert entry is not None, f"{mistake['misconception']!r} is not in course/content/misconceptions.toml"
        failing = [c for e in result["exercises"] for c in e["checks"] if c["status"] != "passed"]
        labelled = [check for check in failing if check["misconception"]]
        assert labelled, f"no check names {entry.id}"
        assert {check["misconception"] for check in labelled} == {entry.id}
        for check in labelled:
            assert check["mistake_id"] and check["mistake"], "a labelled check names its mistake"
            assert f"This looks like a known mistake: {check['mistake']}." in check["message"]
            assert f"Misconception: {entry.name}. Fix idea: {entry.fix}" in check["message"]


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
