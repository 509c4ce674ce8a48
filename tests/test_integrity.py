"""Edited grading tests are detected by their hashes and replaced by the pristine copy."""

import json
import shutil

import pytest

from course.content import resources
from course.engine import integrity
from tests.helpers import REPO, SOLUTIONS, grade_folder


def test_the_manifest_matches_the_grading_tests_in_this_tree():
    recorded = json.loads(integrity.MANIFEST.read_text())
    present = integrity.grading_files(resources.data_dir("grading"))
    stale = sorted(set(recorded) ^ set(present)) + sorted(
        name for name in recorded if name in present and integrity.digest(present[name]) != recorded[name]
    )
    assert not stale, f"run `python tools/update_grading_manifest.py` (stale: {stale})"


@pytest.fixture
def edited_tests(tmp_path, monkeypatch):
    """lesson 1's grading tests edited so that everything passes, in a copy of the grading
    folder that stands in for the course's own (grading in this process sees it; the tree is
    never edited, so tests running alongside in other processes are not disturbed)."""
    grading = tmp_path / "grading"
    shutil.copytree(resources.data_dir("grading"), grading, ignore=shutil.ignore_patterns("__pycache__"))
    real = resources.data_dir
    monkeypatch.setattr(resources, "data_dir", lambda kind: grading if kind == "grading" else real(kind))
    path = resources.grading_test_path("l01_projections")
    assert path == grading / "test_l01_projections.py"
    path.write_text("def test_everything_passes():\n    assert True\n")
    return path


def test_edited_grading_tests_are_reported_and_the_pristine_copy_grades(edited_tests, tmp_path):
    folder = tmp_path / "ws"
    shutil.copytree(REPO / "lessons", folder)
    result = grade_folder(folder, "l01_projections")
    assert result["status"] == "not-started"
    assert "modified" in result["notice"] and "test_l01_projections.py" in result["notice"]
    passed = grade_folder(SOLUTIONS, "l01_projections")
    assert passed["status"] == "passed" and len(passed["exercises"][0]["checks"]) > 1


def test_untouched_grading_tests_carry_no_notice():
    assert grade_folder(SOLUTIONS, "l01_projections")["notice"] == ""
