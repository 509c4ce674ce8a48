"""Shape traces: the shapes at the named points of the learner's run, against the expected ones."""

import shutil

import pytest

from course.catalog import load_catalog
from course.engine.client import checked_trace
from course.engine.shapes import compare, plan_of, shape_trace
from tests.helpers import SOLUTIONS, solutions_with_mistake

CATALOG = load_catalog()
EXPECTED = [lesson.module for lesson in CATALOG.available() if plan_of(lesson) is not None]
MULTI_HEAD = plan_of(CATALOG.resolve("6"))


def test_lessons_5_to_9_have_a_shape_trace():
    assert [CATALOG.by_module(m).number for m in EXPECTED] == [5, 6, 7, 8, 9]


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_the_solutions_trace_matches_every_named_point(module):
    trace = shape_trace(CATALOG.by_module(module), SOLUTIONS)
    assert trace is not None and trace.mismatch == ""
    assert all(matches for *_, matches in trace.rows)
    assert all(yours == expected for _, _, expected, yours, _ in trace.rows)


@pytest.mark.parametrize("module", ["l06_multi_head", "l08_gqa"])
def test_a_split_without_the_swap_is_named_at_its_point(tmp_path, module):
    folder = solutions_with_mistake(tmp_path, "l05_heads", "split_no_swap")
    shutil.copy(SOLUTIONS / f"{module}.py", folder)
    trace = shape_trace(CATALOG.by_module(module), folder)
    assert trace.mismatch.startswith("split_heads gave (B, T, H, K) where (B, H, T, K) was expected")
    assert "a transpose is missing" in trace.mismatch


def test_a_shape_that_is_not_a_permutation_gets_no_transpose_hint():
    trace = compare(MULTI_HEAD, [{"function": "linear", "args": [], "result": [[7, 3, 12]]}])
    assert trace.mismatch == "linear gave (B, T, GK) where (B, T, D) was expected."


def test_calls_that_raised_or_never_happened_are_said_so():
    trace = compare(MULTI_HEAD, [{"function": "linear", "args": []}])
    assert trace.rows[0][3] == "raised an error"
    assert ("concat", "merge_heads", "(B, T, D)", "not called", True) in trace.rows


def test_lessons_without_a_pipeline_have_no_trace():
    assert shape_trace(CATALOG.by_module("l03_attention"), SOLUTIONS) is None


def test_a_recorded_trace_is_data_checked_before_use_and_dropped_whole_when_malformed():
    good = [{"function": "linear", "args": [[7, 3, 24], None], "result": [[7, 3, 24]]}, {"function": "f"}]
    assert checked_trace(good) == good
    nested: list = [3]
    for _ in range(100):
        nested = [nested]
    for bad in (
        [{"function": "linear", "args": [], "result": [[[7], 3, 24]]}],  # unhashable: crashed compare
        [{"function": ["linear"], "args": []}],
        [{"function": "x" * 1000, "args": []}],
        [{"function": "linear", "args": [nested]}],
        [{"function": "linear", "args": "[7, 3]"}],
        [{"function": "linear", "result": [[-1]]}, {"function": "linear", "result": [[True]]}],
        [{"function": "linear", "result": [[2.0]]}],
        ["linear"],
        [{"function": "linear"}] * 5000,
        {"function": "linear"},
        None,
    ):
        assert checked_trace(bad) == []
    assert compare(MULTI_HEAD, checked_trace(good)).rows  # what passes is what compare reads
