"""Every solution passes its lesson; every skeleton is graded "not-started" without crashing."""

import pytest

from course.content.catalog import load_catalog
from course.engine.results import KINDS
from tests.helpers import LESSONS, SOLUTIONS, grade_folder

AVAILABLE = [lesson.module for lesson in load_catalog().available()]


def every_check(result):
    return [check for exercise in result["exercises"] for check in exercise["checks"]]


@pytest.mark.parametrize("module", AVAILABLE)
def test_the_solution_passes_every_check_and_every_catalog_exercise_has_checks(module):
    result = grade_folder(SOLUTIONS, module)
    failing = [(c["name"], c["message"][:300]) for c in every_check(result) if c["status"] != "passed"]
    assert result["status"] == "passed" and not failing, failing or result["message"]
    lesson = load_catalog().by_module(module)
    assert [e["name"] for e in result["exercises"]] == [e.name for e in lesson.exercises]
    for exercise in result["exercises"]:
        assert len(exercise["checks"]) >= 3, exercise["name"]
        for check in exercise["checks"]:
            assert set(check) == {
                "name",
                "status",
                "message",
                "mistake",
                "misconception",
                "mistake_id",
                "kind",
                "raised_in",
                "call_line",
                "naming",
                "blamed",
                "title",
            }
            assert check["title"], f"{check['name']} has no title (its test's docstring)"
            assert check["kind"] in KINDS


@pytest.mark.parametrize("module", AVAILABLE)
def test_the_skeleton_is_not_started_in_every_check(module):
    result = grade_folder(LESSONS, module)
    assert result["status"] == "not-started", result["message"]
    assert {c["status"] for c in every_check(result)} == {"not-started"}
