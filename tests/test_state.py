"""The progress file: round-trips, refuses what it cannot trust, never leaves half a file."""

import json

import pytest

from course.workspace import state


def test_state_round_trips_through_the_file(tmp_path):
    path = tmp_path / ".course" / "state.json"
    saved = state.State(welcomed=True)
    saved.lesson("l01_projections").status = "passed"
    saved.lesson("l01_projections").hints["linear"] = 2
    state.save(saved, path)
    loaded = state.load(path)
    assert loaded.status("l01_projections") == "passed"
    assert loaded.lessons["l01_projections"].hints == {"linear": 2}
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]  # no temporary left behind


@pytest.mark.parametrize(
    "content, reason",
    [
        ('{"format": 1, "lessons": {"l01', "not valid JSON"),
        ("", "not valid JSON"),
        ("[1, 2]", "did not hold an object"),
        ('{"format": 99, "lessons": {}}', "newer version of the course"),
        ('{"lessons": {}}', "unknown format"),
        ('{"format": 1, "lessons": {"l01_projections": {"status": 3}}}', "wrong type"),
        ('{"format": 1, "lessons": {"l01_projections": {"hints": {"linear": -1}}}}', "whole numbers"),
    ],
)
def test_a_corrupt_truncated_or_future_state_is_refused_with_a_reason(tmp_path, content, reason):
    path = tmp_path / "state.json"
    path.write_text(content)
    with pytest.raises(state.StateProblem, match=reason):
        state.load(path)


def test_a_missing_state_is_refused(tmp_path):
    with pytest.raises(state.StateProblem, match="no progress file"):
        state.load(tmp_path / "state.json")


def test_saved_state_is_plain_sorted_json(tmp_path):
    path = tmp_path / "state.json"
    state.save(state.State(), path)
    assert json.loads(path.read_text()) == {"format": 1, "lessons": {}, "placed": [], "welcomed": False}


def test_a_state_from_before_recheck_marks_loads_and_needs_no_recheck(tmp_path):
    path = tmp_path / "state.json"
    path.write_text('{"format": 1, "lessons": {"l03_attention": {"status": "passed"}}}')
    loaded = state.load(path)
    assert loaded.status("l03_attention") == "passed" and not loaded.needs_recheck("l03_attention")
    loaded.lesson("l03_attention").recheck_after = "l02_softmax"
    state.save(loaded, path)
    assert state.load(path).needs_recheck("l03_attention")


def test_opening_a_session_spells_passed_as_the_engine_writes_it():
    """course.workspace.session keeps its own copy of the status (so `course list` never imports the
    engine); a lesson counts as done only if both spell it the same."""
    from course.engine import results
    from course.workspace import session

    assert session.PASSED == results.PASSED
