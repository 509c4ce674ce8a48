"""check_array explains a wrong answer in the learner's terms; a check report shows the most
explaining failure first."""

import numpy as np
import pytest
from rich.console import Console

from course.content.catalog import load_catalog
from course.engine.grading import blame
from course.engine.results import EXAMPLE, HAND_CHECKED, PROPERTY, CheckResult, ExerciseResult, LessonResult
from course.engine.testing import error_shapes
from course.engine.testing.compare import (
    KnownMistake,
    Mistake,
    check_array,
    check_scalar,
    diagnose,
    named_by_code,
    rule_out,
    take_ruled_out,
)
from course.engine.wire.messages import Opaque
from course.render import screens
from course.workspace import folder as ws
from course.workspace.session import open_session
from tests.helpers import SOLUTIONS, grade_folder, import_lessons, solutions_with, solutions_with_mistake

EXPECTED = np.arange(2 * 3 * 4, dtype=np.float64).reshape(2, 3, 4)
MISSING = Mistake("missing-scale", "the scale is missing", misconception="missing-scale", exercises=("f",))
DOUBLED = Mistake("doubled", "doubled", exercises=("f",))
NEGATED = Mistake("negated", "negated", exercises=("f",))


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
    assert "returned wrong values" in str(caught.value)  # the report adds the name, for its exercise


def test_a_mistake_that_does_not_match_is_not_claimed():
    assert diagnose(EXPECTED * 3, {DOUBLED: EXPECTED * 2}, EXPECTED) is None
    with pytest.raises(AssertionError) as caught:
        check_array(EXPECTED * 3, EXPECTED, what="f(x)", dims="B T D", mistakes={DOUBLED: EXPECTED * 2})
    assert not isinstance(caught.value, KnownMistake)


def test_a_variant_that_is_the_right_answer_on_this_case_names_nothing():
    # The case cannot tell the mistake from the right answer, so matching it is no evidence.
    wrong = EXPECTED + 1
    assert diagnose(wrong, {DOUBLED: wrong, MISSING: EXPECTED}, EXPECTED) is DOUBLED
    zero_case = np.zeros(4)  # doubling zeros is harmless here
    assert diagnose(np.ones(4), {DOUBLED: zero_case, NEGATED: np.ones(4)}, zero_case) is NEGATED
    assert diagnose(zero_case + 1, {DOUBLED: zero_case * 2}, zero_case) is None


def test_a_near_miss_is_named_after_no_mistake_that_is_near_the_right_answer():
    # float32 arithmetic cast back: 1e-6 off, within the matching tolerance of a variant that
    # differs from the right answer by less than that tolerance too.
    near = EXPECTED * (1 + 1e-6)
    assert diagnose(near, {DOUBLED: EXPECTED * (1 + 5e-5)}, EXPECTED) is None


def test_an_all_zero_answer_is_evidence_of_no_mistake_unless_a_number_was_the_mistake():
    zeros = np.zeros(4)
    assert diagnose(zeros, {DOUBLED: zeros, NEGATED: zeros}, np.arange(4.0)) is None
    assert diagnose(np.full(4, np.nan), {DOUBLED: np.full(4, np.nan)}, np.arange(4.0)) is None
    assert diagnose(zeros, {DOUBLED: zeros}, np.full(4, np.nan)) is DOUBLED  # 0 instead of NaN
    assert diagnose(np.full(4, 7.0), {DOUBLED: np.full(4, 7.0)}, np.arange(4.0)) is DOUBLED


def test_matching_variants_that_agree_are_named_together_and_ones_that_differ_are_not():
    wrong = EXPECTED * 2
    both = diagnose(wrong, {DOUBLED: wrong, MISSING: lambda: wrong.copy()}, EXPECTED)
    assert both is not None and both.claims() == (
        ("doubled", "doubled"),
        ("missing-scale", "the scale is missing"),
    )
    apart = wrong * (1 + 1.8e-4)  # each within the matching tolerance of the answer, not of each other
    assert diagnose(wrong * (1 + 9e-5), {DOUBLED: wrong, NEGATED: apart}, EXPECTED) is None


def test_a_wrong_dtype_with_right_values_is_named_only_by_a_variant_of_that_dtype():
    wide = EXPECTED.astype(np.float64)
    narrow = EXPECTED.astype(np.float32)
    assert diagnose(wide, {DOUBLED: narrow.astype(np.float64)}, narrow) is DOUBLED
    assert diagnose(wide, {DOUBLED: narrow}, narrow) is None


def test_a_count_is_matched_exactly():
    assert diagnose(np.asarray(1_000_050), {DOUBLED: np.asarray(1_000_000)}, np.asarray(7)) is None
    assert diagnose(np.asarray(14), {DOUBLED: np.asarray(14)}, np.asarray(7)) is DOUBLED


def test_a_passed_comparison_rules_out_the_mistakes_it_tells_apart():
    take_ruled_out()
    worded = DOUBLED.plus(" (twice)")
    rule_out({DOUBLED: EXPECTED * 2, NEGATED: EXPECTED, worded: lambda: EXPECTED * 2}, EXPECTED)
    assert take_ruled_out() == {("doubled", "doubled")}  # NEGATED equals it here; a callable is left
    assert take_ruled_out() == frozenset()
    rule_out({Mistake.any_of(DOUBLED, NEGATED): EXPECTED * 2}, EXPECTED)
    assert take_ruled_out() == {("doubled", "doubled"), ("negated", "negated")}


def test_code_patterns_name_the_mistake_that_includes_every_other_match_and_only_for_its_exercise():
    both = Mistake("both", "k and v from x_q", exercises=("f",))
    keys = Mistake("keys", "k from x_q", exercises=("f",))
    other = Mistake("other", "somewhere else", exercises=("g",))
    patterns = {both: (r"k = x_q", r"v = x_q"), keys: r"k = x_q", other: r"k = x_q"}
    assert named_by_code(["k = x_q @ w", "v = x_q @ w"], patterns, "f") is both
    assert named_by_code(["k = x_q @ w"], patterns, "f") is keys
    assert named_by_code(["k = x_q @ w"], patterns, "g") is other
    clash = {keys: r"k = x_q", NEGATED: r"@ w"}  # two patterns, neither including the other
    assert named_by_code(["k = x_q @ w"], clash, "f") is None


def test_a_mistake_must_say_which_exercises_it_belongs_to():
    with pytest.raises(ValueError, match="exercises it belongs to"):
        Mistake("doubled", "doubled")
    assert DOUBLED.belongs_to("f") and not DOUBLED.belongs_to("g")
    assert Mistake.any_of(DOUBLED, Mistake("x", "x", exercises=("g",))).exercises == ("f", "g")


def test_a_mistake_named_by_a_bare_sentence_is_a_grader_bug_even_when_the_answer_is_right():
    with pytest.raises(TypeError, match="keyed by Mistake"):
        check_array(EXPECTED, EXPECTED, what="f(x)", dims="B T D", mistakes={"doubled": EXPECTED * 2})
    with pytest.raises(TypeError, match="must be a Mistake"):
        KnownMistake("f(x) is wrong", "doubled")  # type: ignore[arg-type]


def test_a_mistake_id_is_kebab_case_and_its_misconception_is_in_the_registry():
    with pytest.raises(ValueError, match="kebab-case"):
        Mistake("Missing Scale", "the scale is missing", exercises=("f",))
    with pytest.raises(ValueError, match="does not hold"):
        Mistake(
            "missing-scale", "the scale is missing", misconception="no-such-misconception", exercises=("f",)
        )


def test_a_mistake_reads_as_its_sentence_and_keeps_its_ids_when_worded_for_a_case():
    axis = Mistake("wrong-axis", "over axis {axis}", misconception="softmax-wrong-axis", exercises=("f",))
    worded = axis.format(axis=0).plus(" (is the axis ignored?)")
    assert str(worded) == "over axis 0 (is the axis ignored?)" and f"{worded}" == worded.says
    assert (worded.id, worded.misconception, worded.exercises) == ("wrong-axis", "softmax-wrong-axis", ("f",))
    both = Mistake.any_of(DOUBLED, MISSING)
    assert both.says == "doubled; or the scale is missing"
    assert (both.id, both.misconception) == ("doubled-or-missing-scale", "")  # they show different ones


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
    assert "merge_heads (hand-checked)" in short
    assert "a small case checked by hand (B=1, H=2, T=2, K=2)" in " ".join(short.split())
    assert "[2. 3. 0. 1.]" in short and short.count("returned wrong values") == 1
    assert f"{failing - 1} more checks not passed: `course check 5 --verbose` shows them all." in short
    full = render(screens.result_screen(lesson, result, session, verbose=True))
    assert full.count("merged in reverse order") == failing > 1
    assert full.index("small case checked by hand") < full.index(
        "merge_heads maps (B, H, T, K) to (B, T, H*K)"
    )
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
        f"(`course check {load_catalog().by_module(check.raised_in).number}`), the bug is in what "
        "that line passes to it"
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


# ---------------------------------------------------------------- blame where the cause is
def test_a_check_that_fails_because_a_function_it_uses_fails_blames_that_function(tmp_path):
    # relative_position_share with the offset pointing the wrong way: classify_heads, which
    # calls it, fails too, and must send the learner to relative_position_share, not name a
    # classifier mistake.
    result = grade_folder(
        solutions_with_mistake(tmp_path, "l10_head_roles", "share_offset_sign"), "l10_head_roles"
    )
    by_name = {exercise["name"]: exercise for exercise in result["exercises"]}
    assert by_name["relative_position_share"]["status"] != "passed"
    failing = [c for c in by_name["classify_heads"]["checks"] if c["status"] != "passed"]
    assert failing
    for check in failing:
        assert check["blamed"] == "relative_position_share" and not check["mistake_id"]
        assert (
            "`classify_heads` uses your `relative_position_share`, which fails its own checks"
            in check["message"]
        )
        assert "known mistake" not in check["message"]
    own = [c for c in by_name["relative_position_share"]["checks"] if c["status"] != "passed"]
    assert any("the offset points the wrong way" in c["message"] for c in own)


def test_a_failing_earlier_lesson_takes_the_blame_from_the_checks_of_functions_that_use_it():
    lesson = load_catalog().by_module("l03_attention")
    named = CheckResult(
        "t", "failed", "wrong\nThis looks like a known mistake: x.", mistake="x", mistake_id="x"
    )
    named.naming = "\nThis looks like a known mistake: x."
    result = LessonResult(
        "l03_attention",
        "failed",
        [
            ExerciseResult("attention_scores", "failed", [CheckResult("s", "failed", "scores wrong")]),
            ExerciseResult("scaled_dot_product_attention", "failed", [named, CheckResult("ok", "passed")]),
        ],
    )
    blame.earlier_lessons(result, lesson, ["l02_softmax"])
    assert result.exercises[0].checks[0].message == "scores wrong"  # it calls no earlier lesson
    assert named.message == (
        "wrong\n`scaled_dot_product_attention` uses your `softmax` from l02_softmax.py, which does not "
        "pass its own check (`course check 2`): fix it first."
    )
    assert (named.mistake, named.mistake_id, named.blamed) == ("", "", "l02_softmax.softmax")
    assert result.exercises[1].checks[1].message == ""


@pytest.mark.parametrize(
    "broken, says",
    [
        (
            "def softmax(x, axis=-1)\n    return x\n",
            "l03_attention.py imports your l02_softmax.py, which has a syntax error (line 1), so none "
            "of this lesson can run: fix it first (`course check 2`).",
        ),
        (
            None,
            "l03_attention.py imports your l02_softmax.py, which is not in your workspace: "
            "`course reset 2` brings back its fresh skeleton, or put your own copy back.",
        ),
    ],
)
def test_an_earlier_lesson_that_cannot_be_imported_is_named_in_one_line_not_the_graded_file(
    tmp_path, broken, says
):
    folder = solutions_with(tmp_path, "l02_softmax", broken or "")
    if broken is None:
        (folder / "l02_softmax.py").unlink()
    result = grade_folder(folder, "l03_attention")
    assert (result["status"], result["message"]) == ("error", says)


def test_an_index_error_shows_the_line_that_made_the_array_it_indexed(tmp_path):
    source = (SOLUTIONS / "l05_heads.py").read_text()
    start = source.index("def merge_heads(")
    body = source[start:]
    broken = source[:start] + body.replace(
        "    ### BEGIN SOLUTION\n",
        "    ### BEGIN SOLUTION\n    shape = x.shape[:2]  # (B, H): one axis short\n    sizes = shape[3]\n",
        1,
    )
    folder = solutions_with(tmp_path, "l05_heads", broken)
    result = grade_folder(folder, "l05_heads")
    merge = next(e for e in result["exercises"] if e["name"] == "merge_heads")
    failing = [c for c in merge["checks"] if c["status"] != "passed"]
    assert failing and all("IndexError" in c["message"] for c in failing)
    line = broken.splitlines().index("    shape = x.shape[:2]  # (B, H): one axis short") + 1
    assert all(
        f"`shape` was made on line {line}: shape = x.shape[:2]  # (B, H): one axis short" in c["message"]
        for c in failing
    )


def test_a_float64_answer_off_by_float32_rounding_says_so_and_names_no_mistake():
    rounded = EXPECTED * (1 + 3e-6)
    message = message_of(rounded, mistakes={DOUBLED: lambda: EXPECTED * (1 + 5e-5)})
    assert "every value is right to about 6 digits" in message
    assert "float32 arithmetic rounds at about 1e-7" in message
    assert "known mistake" not in message
    assert "right to about" not in message_of(EXPECTED * 1.01)  # a real error says nothing of it
