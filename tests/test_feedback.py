"""check_array explains a wrong answer in the learner's terms; a check report shows the most
explaining failure first."""

import numpy as np
import pytest
from rich.console import Console

from course.content.catalog import load_catalog
from course.engine.results import EXAMPLE, HAND_CHECKED, PROPERTY, CheckResult, ExerciseResult, LessonResult
from course.engine.testing import error_shapes
from course.engine.testing.compare import KnownMistake, Mistake, check_array, check_scalar, diagnose
from course.engine.wire.messages import Opaque
from course.render import screens
from course.workspace import folder as ws
from course.workspace.session import open_session
from tests.helpers import grade_folder, import_lessons, solutions_with_mistake

EXPECTED = np.arange(2 * 3 * 4, dtype=np.float64).reshape(2, 3, 4)
MISSING = Mistake("missing-scale", "the scale is missing", misconception="missing-scale")
DOUBLED = Mistake("doubled", "doubled")


def message_of(actual, expected=EXPECTED, **kwargs):
    kwargs.setdefault("dims", "B T D")
    with pytest.raises(AssertionError) as caught:
        check_array(actual, expected, what="f(x)", **kwargs)
    return str(caught.value)


def test_a_correct_answer_within_tolerance_passes():
    check_array(EXPECTED + 1e-12, EXPECTED, what="f(x)", dims="B T D")
    check_array(
        EXPECTED.astype(np.float32) * (1 + 1e-6), EXPECTED.astype(np.float32), what="f(x)", dims="B T D"
    )


def test_a_swapped_shape_is_read_back_in_dimension_letters():
    message = message_of(np.swapaxes(EXPECTED, 1, 2))
    assert "expected (B, T, D) = (2, 3, 4), got (2, 4, 3), which reads as (B, D, T)" in message


def test_the_wrong_dtype_is_named():
    assert "returned dtype float64; expected float32" in message_of(EXPECTED, EXPECTED.astype(np.float32))


def test_wrong_values_show_the_error_the_share_close_and_a_slice():
    actual = EXPECTED.copy()
    actual[1, 2, 3] += 5
    message = message_of(actual)
    assert "largest error 5" in message and "96% of the values are close" in message
    assert "expected[1, 2, :]" in message and "got     [1, 2, :]" in message


def test_nans_are_counted_and_located():
    actual = EXPECTED.copy()
    actual[0, 1] = np.nan
    assert "4 NaN values where numbers were expected (the first at [0, 1, 0])" in message_of(actual)


def test_a_wrong_mask_lists_every_differing_entry_and_its_row_without_eliding_it(tmp_path):
    # Lesson 4's padding mask off by one (j <= lengths[b]): numpy's summary of a (3, 1, 7) mask
    # printed column 3, the first wrong one, as "...".
    (right,) = import_lessons("l04_masks")
    (wrong,) = import_lessons(
        "l04_masks", folder=solutions_with_mistake(tmp_path, "l04_masks", "padding_less_or_equal")
    )
    lengths = np.array([3, 7, 1])
    message = message_of(wrong.padding_mask(lengths, 7), right.padding_mask(lengths, 7), dims="B T S")
    assert message.splitlines()[:5] == [
        "f(x) is wrong at 2 of 21 positions:",
        "  at [0, 0, 3]: expected False, got True",
        "  at [2, 0, 1]: expected False, got True",
        "  expected[0, 0, :] = [ True  True  True False False False False]",
        "  got     [0, 0, :] = [ True  True  True  True False False False]",
    ]
    assert "..." not in message


def test_many_wrong_mask_entries_are_listed_a_few_and_counted_with_the_wrong_column_in_view():
    expected = np.tril(np.ones((2, 3, 40), dtype=bool))
    actual = expected.copy()
    actual[:, :, 30:32] = True  # 12 wrong entries in a row too long for one line
    lines = message_of(actual, expected, dims="B T S").splitlines()
    assert lines[0] == "f(x) is wrong at 12 of 240 positions:"
    assert lines[1:3] == [
        "  at [0, 0, 30]: expected False, got True",
        "  at [0, 0, 31]: expected False, got True",
    ]
    assert lines[7] == "  ... and 6 more"
    assert lines[8:] == [
        "  expected[0, 0, 25:35] = [False False False False False False False False False False]",
        "  got     [0, 0, 25:35] = [False False False False False  True  True False False False]",
    ]


def test_a_known_mistake_is_named_and_carried_on_the_exception():
    with pytest.raises(KnownMistake) as caught:
        check_array(
            EXPECTED * 2,
            EXPECTED,
            what="f(x)",
            dims="B T D",
            mistakes={MISSING: lambda: EXPECTED * 2},
        )
    assert caught.value.mistake == MISSING
    assert (
        caught.value.mistake.id == "missing-scale" and caught.value.mistake.misconception == "missing-scale"
    )
    assert "This looks like a known mistake: the scale is missing." in str(caught.value)


def test_a_mistake_that_does_not_match_is_not_claimed():
    assert diagnose(EXPECTED * 3, {DOUBLED: EXPECTED * 2}) is None
    assert "known mistake" not in message_of(EXPECTED * 3, mistakes={DOUBLED: EXPECTED * 2})


def test_a_mistake_named_by_a_bare_sentence_is_a_grader_bug_even_when_the_answer_is_right():
    with pytest.raises(TypeError, match="keyed by Mistake"):
        check_array(EXPECTED, EXPECTED, what="f(x)", dims="B T D", mistakes={"doubled": EXPECTED * 2})
    with pytest.raises(TypeError, match="must be a Mistake"):
        KnownMistake("f(x) is wrong", "doubled")  # type: ignore[arg-type]


def test_a_mistake_id_is_kebab_case_and_its_misconception_is_in_the_registry():
    with pytest.raises(ValueError, match="kebab-case"):
        Mistake("Missing Scale", "the scale is missing")
    with pytest.raises(ValueError, match="does not hold"):
        Mistake("missing-scale", "the scale is missing", misconception="no-such-misconception")


def test_a_mistake_reads_as_its_sentence_and_keeps_its_ids_when_worded_for_a_case():
    axis = Mistake("wrong-axis", "over axis {axis}", misconception="softmax-wrong-axis")
    worded = axis.format(axis=0).plus(" (is the axis ignored?)")
    assert str(worded) == "over axis 0 (is the axis ignored?)" and f"{worded}" == worded.says
    assert (worded.id, worded.misconception) == ("wrong-axis", "softmax-wrong-axis")
    both = Mistake.any_of(DOUBLED, MISSING)
    assert both.says == "doubled; or the scale is missing"
    assert (both.id, both.misconception) == ("doubled-or-missing-scale", "missing-scale")


@pytest.mark.parametrize(
    "actual, words",
    [
        (None, "returned None (is a `return` missing?)"),
        ([1, 2], "returned a list"),
        (Opaque("Tensor", "tensor([1.])"), "returned a Tensor"),
    ],
)
def test_a_non_array_answer_says_what_came_back(actual, words):
    assert words in message_of(actual)


def test_scalars_compare_exactly_and_reject_non_numbers():
    check_scalar(12, 12, what="n")
    with pytest.raises(AssertionError, match="returned 11; expected 12"):
        check_scalar(11, 12, what="n")
    with pytest.raises(AssertionError, match="returned a str"):
        check_scalar("12", 12, what="n")


def test_failures_are_ordered_named_mistake_then_hand_checked_then_fixed_examples_then_properties():
    def check(name, kind, mistake=""):
        return CheckResult(name, "failed", f"{name} failed", mistake=mistake, kind=kind)

    result = LessonResult(
        "l05_heads",
        "failed",
        [
            ExerciseResult("split_heads", "passed", [CheckResult("ok", "passed")]),
            ExerciseResult(
                "merge_heads",
                "failed",
                [
                    check("generated", PROPERTY),
                    check("random", EXAMPLE),
                    check("by_hand", HAND_CHECKED),
                    check("random_named", EXAMPLE, mistake="reversed"),
                    check("by_hand_named", HAND_CHECKED, mistake="reversed"),
                ],
            ),
        ],
    )
    order = [c.name for _, c in result.problems()]
    assert order == ["by_hand_named", "random_named", "by_hand", "random", "generated"]
    assert result.first_problem()[1].name == "by_hand_named"
    assert LessonResult.from_dict(result.to_dict()).problems()[0][1].kind == HAND_CHECKED


def render(renderable) -> str:
    console = Console(record=True, width=120, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_a_merge_in_reverse_head_order_shows_the_hand_checked_case_first_and_verbose_shows_all(tmp_path):
    # Issue 14: the first failing check was a random (B, H, T, K) case with elided values; the
    # hand-checked one that explains it ("expected [0. 1. 2. 3.] got [2. 3. 0. 1.]") was hidden.
    folder = solutions_with_mistake(tmp_path, "l05_heads", "merge_reverse_head_order")
    result = LessonResult.from_dict(grade_folder(folder, "l05_heads"))
    exercise, first = result.first_problem()
    assert (exercise.name, first.name, first.kind) == (
        "merge_heads",
        "test_merge_heads_small_case_by_hand",
        HAND_CHECKED,
    )
    assert "expected[0, 0, :] = [0. 1. 2. 3.]\n  got     [0, 0, :] = [2. 3. 0. 1.]" in first.message
    assert "merged in reverse order" in first.message
    workspace, _ = ws.init(tmp_path / "workspace", load_catalog())
    session = open_session(str(workspace.root))
    lesson = load_catalog().resolve("l05_heads")
    failing = len(result.problems())
    short = render(screens.result_screen(lesson, result, session))
    assert "merge_heads: merge heads small case by hand (hand-checked)" in short
    assert "[2. 3. 0. 1.]" in short and short.count("returned wrong values") == 1
    assert f"{failing - 1} more checks not passed: `course check 5 --verbose` shows them all." in short
    full = render(screens.result_screen(lesson, result, session, verbose=True))
    assert full.count("merged in reverse order") == failing > 1
    assert full.index("small case by hand") < full.index("merge heads maps b h t k to b t hk")
    assert "--verbose" not in full


def test_an_error_raised_in_an_earlier_lesson_points_at_the_call_in_this_one(tmp_path):
    # Issue 14: lesson 6 with v not split into heads failed inside the learner's correct
    # lesson-1/3 code, and the traceback ended there, as if that file were wrong.
    folder = solutions_with_mistake(tmp_path, "l06_multi_head", "values_not_split_into_heads")
    result = LessonResult.from_dict(grade_folder(folder, "l06_multi_head"))
    _, check = result.first_problem()
    source = (folder / "l06_multi_head.py").read_text().splitlines()
    assert check.raised_in in ("l01_projections", "l03_attention") and check.call_line > 0
    assert (
        f"This error is raised in your {check.raised_in}.py, called from line {check.call_line} of "
        f"l06_multi_head.py (in multi_head_attention).\nIf {check.raised_in}.py passes its own checks "
        f"(`course check {check.raised_in}`), the bug is in what that line passes to it"
    ) in check.message
    called = source[check.call_line - 1].strip()  # shown by the traceback above the pointer
    assert (
        f"l06_multi_head.py, line {check.call_line}, in multi_head_attention:\n    {called}" in check.message
    )
    unknown = check.message
    result.point_at_callers([])  # the earlier lesson has not passed: nothing is claimed
    assert check.message == unknown
    result.point_at_callers([check.raised_in])
    assert check.message == unknown + (
        f"\n{check.raised_in}.py does pass its own checks (your last check of it), so the bug is on "
        f"line {check.call_line} of l06_multi_head.py."
    )


def test_a_raw_numpy_error_is_shown_with_the_call_shapes_in_the_lessons_letters(tmp_path):
    # q @ k without the transpose raises on the hand-checked (T, K) case: numpy's "size 3 is
    # different from 4" reads as S and K once the call's shapes are given in letters. The TODO
    # text of the function mentions k.T, which must not be read as the k.T mistake.
    folder = solutions_with_mistake(tmp_path, "l03_attention", "no_transpose")
    result = LessonResult.from_dict(grade_folder(folder, "l03_attention"))
    by_hand = next(c for _, c in result.problems() if c.name == "test_scores_small_case_by_hand")
    assert by_hand.status == "error" and by_hand.mistake_id == ""
    assert by_hand.message.endswith(
        "\nThis call gave attention_scores: q (T, K) = (2, 4), k (S, K) = (3, 4)."
        "\nRead the sizes in the error with these letters: T = 2, K = 4, S = 3."
    )


def test_call_shapes_name_only_the_sizes_that_fit_one_letter():
    dims = {"f": {"x": "B T D", "n": "", "mask": "T S"}}
    text = error_shapes.in_letters("f", {"argument 1": (2, 3, 2), "mask": (3, 5), "argument 2": ()}, dims)
    assert text == (
        "This call gave f: x (B, T, D) = (2, 3, 2), mask (T, S) = (3, 5)."
        "\nRead the sizes in the error with these letters: T = 3, S = 5."
    )
    assert error_shapes.in_letters("g", {"argument 1": (2,)}, dims) == ""
