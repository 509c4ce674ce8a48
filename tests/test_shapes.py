"""Shape traces: the shapes at the named points of the learner's run, against the expected ones."""

import shutil

import pytest

from course.content.catalog import load_catalog
from course.engine.calls.replies import checked_trace
from course.engine.pictures.shapes import compare, letters, plan_of, shape_trace
from tests.helpers import SOLUTIONS, solutions_with, solutions_with_mistake

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
    trace = compare(MULTI_HEAD, [{"function": "linear", "args": [[7, 3, 24]], "result": [[7, 3, 12]]}])
    assert trace.mismatch == "linear gave (B, T, 12) where (B, T, D) was expected (q after projection)."


def with_edit(tmp_path, module, old, new):
    """Every solution, with one line of ``module`` changed (it must occur there once)."""
    source = (SOLUTIONS / f"{module}.py").read_text()
    assert source.count(old) == 1, f"{old!r} is no longer in solutions/{module}.py once"
    return solutions_with(tmp_path, module, source.replace(old, new))


def flagged(trace):
    return [(index, yours) for index, (*_, yours, matches) in enumerate(trace.rows) if not matches]


def test_keys_projected_from_the_queries_are_flagged_at_k_not_at_v(tmp_path):
    # Lesson 6 with only k projected from x_q: the second linear call is k's, and v is right.
    wrong_k = 'k = linear(x_q, params["w_k"], params.get("b_k"))'
    folder = with_edit(tmp_path, "l06_multi_head", wrong_k.replace("x_q", "x_kv"), wrong_k)
    trace = shape_trace(CATALOG.by_module("l06_multi_head"), folder)
    assert trace.mismatch == "linear gave (B, T, D) where (B, S, D) was expected (k after projection)."
    assert flagged(trace) == [(1, "(B, T, D)"), (4, "(B, H, T, K)"), (6, "raised an error")]


def test_keys_split_into_every_query_head_show_the_sizes_they_have_not_other_letters(tmp_path):
    # Lesson 8 with k split into H heads: G*K = 12 columns in 4 heads of 3, where 3 is also T.
    folder = with_edit(tmp_path, "l08_gqa", "k = split_heads(k, G)", "k = split_heads(k, H)")
    trace = shape_trace(CATALOG.by_module("l08_gqa"), folder)
    assert trace.mismatch == "split_heads gave (B, 4, S, 3) where (B, G, S, K) was expected (k after split)."
    assert flagged(trace)[0] == (4, "(B, 4, S, 3)")  # row 4 is k's split; v's (row 5) is right


def test_a_size_that_equals_another_letter_on_a_wrong_axis_is_shown_as_its_number(tmp_path):
    # Lesson 9's cache holds S - 1 = 4 keys, the size of H: not "(B, H, H, K)".
    folder = solutions_with_mistake(tmp_path, "l09_kv_cache", "off_by_one_cache_only")
    trace = shape_trace(CATALOG.by_module("l09_kv_cache"), folder)
    assert trace.mismatch == "repeat_kv gave (B, H, 4, K) where (B, H, S, K) was expected (keys repeated)."
    assert ("weights", "scaled_dot_product_attention", "(B, H, 1, S)", "(B, H, 1, 4)", False) in trace.rows


def test_a_size_that_maps_to_no_letter_or_to_two_is_shown_as_its_number():
    assert letters((7, 24, 5), {"B": 7, "D": 24, "HK": 24}) == "(B, 24, 5)"


def test_right_shapes_in_another_call_order_are_not_flagged():
    # k and v projected before q: every result is right, only the order differs from the plan's.
    calls = [
        {"function": "linear", "args": [[7, 5, 24], [24, 24]], "result": [[7, 5, 24]]},
        {"function": "linear", "args": [[7, 5, 24], [24, 24]], "result": [[7, 5, 24]]},
        {"function": "linear", "args": [[7, 3, 24], [24, 24]], "result": [[7, 3, 24]]},
    ]
    trace = compare(MULTI_HEAD, calls)
    assert trace.mismatch == "" and all(matches for *_, matches in trace.rows)


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
