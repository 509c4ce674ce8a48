"""Grading tests for lesson 4 (l04_masks): causal_mask, padding_mask, combine_masks.

Sizes are all different (B=3, T=4, S=7) so that a mask of the wrong shape reads as wrong letters
and a causal mask aligned top-left (PyTorch's is_causal) differs from one aligned bottom-right.
The expected masks come from slow loops below, one position at a time; the vectorised lambdas
compute the classic WRONG masks, only to name a mistake when an answer matches one of them.
"""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from course.engine.testing import (
    KnownMistake,
    LearnerError,
    Mistake,
    check_array,
    check_not_modified,
    diagnose,
    enumerable,
    exercise,
    hand_checked,
    rng,
    variation,
)

B, T, S = 3, 4, 7


# ---------------------------------------------------------------- oracles (slow and obvious)
def causal_loop(t, s=None):
    """Oracle: query i sits at position i + (s - t) and sees every key at or before it."""
    s = t if s is None else s
    out = np.zeros((t, s), dtype=bool)
    for i in range(t):
        position = i + (s - t)
        for j in range(s):
            out[i, j] = j <= position
    return out


def padding_loop(lengths, s):
    """Oracle: key j of sequence b is real when j < lengths[b]; one row per sequence."""
    out = np.zeros((len(lengths), 1, s), dtype=bool)
    for b, length in enumerate(lengths):
        for j in range(s):
            out[b, 0, j] = j < length
    return out


def combine_loop(*masks):
    """Oracle: element by element, True only where every (broadcast) mask is True."""
    present = [np.asarray(m) for m in masks if m is not None]
    shape = np.broadcast_shapes(*(m.shape for m in present))
    spread = [np.broadcast_to(m, shape) for m in present]
    out = np.zeros(shape, dtype=bool)
    for idx in np.ndindex(*shape):
        out[idx] = all(bool(m[idx]) for m in spread)
    return out


# ---------------------------------------------------------------- classic mistakes, by name
TOP_LEFT = Mistake(
    "causal-top-left",
    "the causal mask is aligned top-left (query i sees keys j <= i, like PyTorch's "
    "is_causal=True) instead of bottom-right (j <= i + (S - T)): with a KV cache the T new "
    "queries are the LAST T of the S positions",
    misconception="top-left-causal",
    exercises=("causal_mask",),
)
WRONG_OFFSET = Mistake(
    "wrong-offset",
    "the offset has the wrong sign: use j <= i + (S - T), not j <= i + (T - S)",
    exercises=("causal_mask",),
)
CAUSAL_FLIPPED = Mistake(
    "causal-flipped",
    "mask polarity reversed: True must mean may attend (the past and the query's own "
    "position), False the future keys",
    exercises=("causal_mask",),
)
DIAGONAL = Mistake(
    "diagonal",
    "off by one: the diagonal is excluded (j < i + (S - T) instead of <=), so a query may "
    "not attend its own position",
    exercises=("causal_mask",),
)
DIAGONAL_EXTRA = Mistake(
    "diagonal-extra",
    "off by one: each query also sees the next position (j <= i + (S - T) + 1), one key of the future",
    exercises=("causal_mask",),
)
TRANSPOSED = Mistake(
    "transposed",
    "the mask is transposed: rows must be queries and columns keys, and query i sees "
    "the keys at or BEFORE its position (the lower triangle)",
    exercises=("causal_mask",),
)
PADDING_2D = Mistake(
    "padding-2d",
    "the query axis is missing: (B, S) instead of (B, 1, S). Against (B, T, S) scores a "
    "(B, S) mask lines its B axis up with T; insert the axis with [:, None, :]",
    exercises=("padding_mask",),
)
PADDING_LAST = Mistake(
    "padding-last",
    "the query axis is in the wrong place: (B, S, 1) instead of (B, 1, S)",
    exercises=("padding_mask",),
)
PADDING_LE = Mistake(
    "padding-le",
    "off by one: j <= lengths[b] lets one padding key through; a sequence of length L "
    "owns keys 0..L-1, so use j < lengths[b]",
    exercises=("padding_mask",),
)
PADDING_FLIPPED = Mistake(
    "padding-flipped",
    "mask polarity reversed: True must mark the real keys (j < lengths[b]), not the "
    "padding (that is PyTorch's key_padding_mask convention, the opposite of ours)",
    exercises=("padding_mask",),
)
COMBINE_OR = Mistake(
    "combine-or",
    "the masks were combined with a logical or: a key must be allowed by EVERY mask, so use np.logical_and",
    exercises=("combine_masks",),
)
COMBINE_FLIPPED = Mistake(
    "combine-flipped",
    "the result is the logical not of the right answer: True must mean may attend",
    exercises=("combine_masks",),
)
NOT_BOOL = Mistake(
    "not-bool",
    "the mask holds numbers instead of booleans: build it from a comparison (j <= i) or "
    "np.ones(..., dtype=bool)",
    exercises=("causal_mask", "combine_masks", "padding_mask"),
)


SWAPPED_TS = Mistake(
    "swapped-ts",
    "t and s are swapped: the mask must be (T, S), one row per query, not (S, T)",
    exercises=("causal_mask",),
)


def check_mask(actual, expected, *, what, dims, mistakes=None):
    """check_array for masks: a wrong dtype gets a message about booleans, not about inputs."""
    if isinstance(actual, np.ndarray) and actual.dtype != np.bool_ and actual.dtype.kind in "biuf":
        right = actual.shape == expected.shape and np.array_equal(actual, expected)
        named = None if right else diagnose(actual, mistakes, expected)
        raise KnownMistake(
            f"{what} returned dtype {actual.dtype}{' (its values are right)' if right else ''}; "
            "a mask must have dtype bool (True = may attend). `~` on integers flips bits "
            "(~1 == -2, still true) and PyTorch adds a float attn_mask to the scores instead of "
            "blocking keys.",
            named or NOT_BOOL,
        )
    check_array(actual, expected, what=what, dims=dims, mistakes=mistakes)


def causal_mistakes(t, s):
    """Named wrong causal masks for causal_mask(t, s)."""
    ones = np.ones((t, s), dtype=bool)
    right = np.tril(ones, k=s - t)
    mistakes = {
        TOP_LEFT: np.tril(ones),
        WRONG_OFFSET: np.tril(ones, k=t - s),
        CAUSAL_FLIPPED: ~right,
        DIAGONAL: np.tril(ones, k=s - t - 1),
        DIAGONAL_EXTRA: np.tril(ones, k=s - t + 1),
        TRANSPOSED: np.triu(ones),
    }
    if t != s:
        mistakes[SWAPPED_TS] = np.tril(np.ones((s, t), dtype=bool), k=t - s)
    return mistakes


def padding_mistakes(lengths, s):
    """Named wrong padding masks for padding_mask(lengths, s)."""
    right = padding_loop(lengths, s)
    lengths = np.asarray(lengths)
    return {
        PADDING_2D: right[:, 0, :],
        PADDING_LAST: right[:, 0, :, None],
        PADDING_LE: (np.arange(s) <= lengths[:, None])[:, None, :],
        PADDING_FLIPPED: ~right,
    }


def combine_mistakes(*masks):
    """Named wrong combinations of the masks (None entries dropped)."""
    present = [np.asarray(m, dtype=bool) for m in masks if m is not None]

    def either():
        out = present[0]
        for m in present[1:]:
            out = np.logical_or(out, m)
        return out

    return {COMBINE_OR: either, COMBINE_FLIPPED: lambda: ~combine_loop(*present)}


# ---------------------------------------------------------------- causal_mask
@exercise("causal_mask")
class TestCausalMask:
    def test_causal_mask_is_t_by_s_and_aligned_bottom_right(self, lesson):
        """causal_mask(4, 7) is (T, S) and aligned bottom-right"""
        # Under an instructor's secret: other sizes t < s, beyond every public call (t >= 8).
        var = variation("causal_mask(T, S)")
        t = var.integers(8, 12, T)
        s = t + var.integers(1, 6, S - T)
        check_mask(
            lesson.causal_mask(t, s),
            causal_loop(t, s),
            what=f"causal_mask({t}, {s})",
            dims="T S",
            mistakes=causal_mistakes(t, s),
        )

    @hand_checked
    def test_causal_mask_small_case_by_hand(self, lesson):
        """causal_mask(2, 5) by hand: 3 cached keys, then 2 new queries"""
        # Under an instructor's secret: e more cached keys in front (s >= 9, beyond every public
        # call), which both queries see and a top-left mask hides.
        e = variation("causal_mask by hand").integers(4, 9, 0)
        s = 5 + e

        def cached(mask):  # the e keys in front are seen by both queries
            return np.concatenate([np.ones((2, e), bool), mask], axis=1)

        # 3 cached tokens and 2 new ones: query 0 sits at position 3, query 1 at position 4.
        expected = cached(np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=bool))
        # A top-left mask puts its diagonal at the first keys: it hides the e keys at the end.
        top_left = np.array([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0]], dtype=bool)
        check_mask(
            lesson.causal_mask(2, s),
            expected,
            what=f"causal_mask(2, {s})",
            dims="T S",
            mistakes={
                TOP_LEFT: np.concatenate([top_left, np.zeros((2, e), bool)], axis=1),
                DIAGONAL: cached(np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], dtype=bool)),
                CAUSAL_FLIPPED: ~expected,
                **causal_mistakes(2, s),
            },
        )

    def test_causal_mask_with_s_omitted_is_the_lower_triangle(self, lesson):
        """with s omitted, causal_mask(t) is the lower triangle, diagonal in"""
        # Under an instructor's secret: other sizes.
        var = variation("causal_mask with s omitted")
        n, m = var.integers(4, 9, 3), var.integers(2, 10, 5)
        # T = S = 3: query i sees keys 0..i, its own position included
        expected = np.tril(np.ones((n, n), bool))  # [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
        check_mask(
            lesson.causal_mask(n),
            expected,
            what=f"causal_mask({n}) (s omitted, so s = t)",
            dims="T S",
            mistakes={
                DIAGONAL: np.tril(np.ones((n, n), bool), k=-1),  # [[0, 0, 0], [1, 0, 0], [1, 1, 0]]
                CAUSAL_FLIPPED: ~expected,
                TRANSPOSED: expected.T,
            },
        )
        check_mask(
            lesson.causal_mask(m, None),
            causal_loop(m),
            what=f"causal_mask({m}, None)",
            dims="T S",
            mistakes=causal_mistakes(m, m),
        )

    def test_one_new_query_sees_every_key(self, lesson):
        """one new query, causal_mask(1, 6), sees every key"""
        # decoding one token at a time: the newest token is the last position and sees everything
        # Under an instructor's secret: more keys (s >= 9, beyond every public call).
        s = variation("one new query").integers(9, 16, 6)
        check_mask(
            lesson.causal_mask(1, s),
            np.ones((1, s), dtype=bool),
            what=f"causal_mask(1, {s})",
            dims="T S",
            mistakes=causal_mistakes(1, s),
        )

    def test_new_queries_get_the_last_rows_of_the_full_mask(self, lesson):
        """causal_mask(t, S) is the last t rows of causal_mask(S, S)"""
        # Under an instructor's secret: more positions (s >= 9, beyond every public call), and
        # another number of new queries in the middle.
        var = variation("the last rows of the full mask")
        s = var.integers(9, 16, S)
        full = lesson.causal_mask(s, s)
        check_mask(
            full, causal_loop(s), what=f"causal_mask({s}, {s})", dims="T S", mistakes=causal_mistakes(s, s)
        )
        for t in (1, var.integers(2, s, 3), s):
            check_mask(
                lesson.causal_mask(t, s),
                full[s - t :],
                what=f"causal_mask({t}, {s}), which must equal the last {t} rows of "
                f"causal_mask({s}) (the {t} new queries are the last {t} positions)",
                dims="T S",
                mistakes=causal_mistakes(t, s),
            )

    def test_causal_mask_is_boolean(self, lesson):
        """causal_mask has dtype bool"""
        # Under an instructor's secret: other sizes t < s, beyond every public call (t >= 8).
        var = variation("causal_mask is boolean")
        t = var.integers(8, 12, 3)
        s = t + var.integers(1, 5, 2)
        out = lesson.causal_mask(t, s)
        check_mask(
            out, causal_loop(t, s), what=f"causal_mask({t}, {s})", dims="T S", mistakes=causal_mistakes(t, s)
        )
        assert out.dtype == np.bool_, f"causal_mask({t}, {s}) has dtype {out.dtype}; it must be bool."

    @given(t=st.integers(1, 6), s=st.integers(1, 8))
    def test_causal_mask_matches_the_loop_for_any_sizes(self, lesson, t, s):
        """causal_mask matches the loop for any t and s"""
        # Under an instructor's secret: t and s grown by c, beyond every public call (t >= 8).
        c = variation("causal_mask for any sizes").integers(7, 12, 0)
        t, s = t + c, s + c
        check_mask(
            lesson.causal_mask(t, s),
            causal_loop(t, s),
            what=f"causal_mask({t}, {s})",
            dims="T S",
            mistakes=causal_mistakes(t, s),
        )


# ---------------------------------------------------------------- padding_mask
def padded(name, lengths, s):
    """(lengths, s) as the case `name` sees them."""
    # Under an instructor's secret: the sequences reordered, and e more keys at the end (s >= 9,
    # beyond every public call), a full-length sequence growing with them.
    var = variation(name)
    order, longer = var.permutation(len(lengths)), s + var.integers(max(9 - s, 1), max(9 - s, 1) + 4, 0)
    lengths = lengths[order]  # a copy
    lengths[lengths == s] = longer
    return lengths, longer


@exercise("padding_mask")
class TestPaddingMask:
    def test_padding_mask_is_b_by_1_by_s(self, lesson):
        """padding_mask(lengths, S) has shape (B, 1, S)"""
        lengths, s = padded("padding_mask(lengths, S)", np.array([3, 7, 1]), S)
        check_mask(
            lesson.padding_mask(lengths, s),
            padding_loop(lengths, s),
            what=f"padding_mask(lengths={lengths.tolist()}, {s})",
            dims="B 1 S",
            mistakes=padding_mistakes(lengths, s),
        )

    @hand_checked
    def test_padding_mask_small_case_by_hand(self, lesson):
        """padding_mask([2, 3], 4) by hand: key j is real when j < length"""
        # Under an instructor's secret: the two sequences swapped, e more padding keys at the end.
        var = variation("padding_mask by hand")
        order, e = var.permutation(2), var.integers(5, 9, 0)
        lengths = np.array([2, 3])[order]

        def more_padding(mask):
            return np.concatenate([mask[order], np.zeros((2, 1, e), bool)], axis=-1)

        # sequence 0 owns keys 0, 1; sequence 1 owns keys 0, 1, 2; key 3 is padding in both
        expected = more_padding(np.array([[[1, 1, 0, 0]], [[1, 1, 1, 0]]], dtype=bool))
        check_mask(
            lesson.padding_mask(lengths, 4 + e),
            expected,
            what=f"padding_mask({lengths.tolist()}, {4 + e})",
            dims="B 1 S",
            mistakes={
                PADDING_2D: expected[:, 0, :],
                PADDING_LE: more_padding(np.array([[[1, 1, 1, 0]], [[1, 1, 1, 1]]], dtype=bool)),
                PADDING_FLIPPED: ~expected,
                **padding_mistakes(lengths, 4 + e),
            },
        )

    def test_length_zero_hides_every_key_and_length_s_none(self, lesson):
        """length 0 hides every key, length S hides none"""
        lengths, s = padded("length zero and length S", np.array([0, S, 4]), S)
        check_mask(
            lesson.padding_mask(lengths, s),
            padding_loop(lengths, s),
            what=f"padding_mask(lengths={lengths.tolist()}, {s})",
            dims="B 1 S",
            mistakes=padding_mistakes(lengths, s),
        )

    def test_padding_mask_broadcasts_over_the_queries(self, lesson):
        """broadcast to (B, T, S), every query of sequence b sees lengths[b] keys"""
        lengths, s = padded("padding_mask broadcast over the queries", np.array([5, 2, 6]), S)
        mask = lesson.padding_mask(lengths, s)
        check_mask(
            mask,
            padding_loop(lengths, s),
            what=f"padding_mask({lengths.tolist()}, {s})",
            dims="B 1 S",
            mistakes=padding_mistakes(lengths, s),
        )
        spread = np.broadcast_to(mask, (B, T, s))  # what attention does with it
        for b in range(B):
            for t in range(T):
                assert spread[b, t].sum() == lengths[b], (
                    f"padding_mask({lengths.tolist()}, {s}) broadcast to (B, T, S): query {t} of sequence "
                    f"{b} may attend {spread[b, t].sum()} keys instead of {lengths[b]}."
                )

    def test_padding_mask_takes_int32_lengths_and_leaves_them_unchanged(self, lesson):
        """int32 lengths work and are left unchanged"""
        lengths, s = padded("int32 lengths", np.array([6, 1, 3], dtype=np.int32), S)
        out = lesson.padding_mask(lengths, s)
        check_not_modified(lesson, "padding_mask(lengths, s)")
        check_mask(
            out,
            padding_loop(lengths, s),
            what=f"padding_mask(int32 {lengths.tolist()}, {s})",
            dims="B 1 S",
            mistakes=padding_mistakes(lengths, s),
        )

    @given(b=st.integers(1, 4), s=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
    def test_padding_mask_matches_the_loop_for_any_lengths(self, lesson, b, s, seed):
        """padding_mask matches the loop for any lengths from 0 to s"""
        # Under an instructor's secret: s grown by c, beyond every public call (s >= 9).
        s += variation("padding_mask for any lengths").integers(8, 12, 0)
        lengths = rng(seed).integers(0, s + 1, size=b)
        check_mask(
            lesson.padding_mask(lengths, s),
            padding_loop(lengths, s),
            what=f"padding_mask(lengths={lengths.tolist()}, {s})",
            dims="B 1 S",
            mistakes=padding_mistakes(lengths, s),
        )


# ---------------------------------------------------------------- combine_masks
NONE_SKIPPED = Mistake(
    "none-skipped",
    "None entries must be skipped: None means no mask, so combine_masks(None, m) is m "
    "and combine_masks(m1, None, m2) is the logical and of m1 and m2",
    exercises=("combine_masks",),
)


def describe(masks):
    return "combine_masks(" + ", ".join("None" if m is None else str(m.shape) for m in masks) + ")"


def combined(lesson, *masks):
    """The learner's combine_masks(*masks); a crash on a None entry becomes a clear failure."""
    try:
        return lesson.combine_masks(*masks)
    except LearnerError as exc:
        if any(m is None for m in masks):
            raise AssertionError(f"{describe(masks)} raised an error. {NONE_SKIPPED}.\n{exc}") from None
        if "non-broadcastable output operand" in str(exc):
            raise AssertionError(
                f"{describe(masks)} raised an error: `out &= m` writes into the first mask, which "
                "cannot grow to the broadcast shape (and must not be changed anyway). Build a new "
                f"array: out = np.logical_and(out, m).\n{exc}"
            ) from None
        raise


def shown(value):
    """A short description of whatever came back instead of a mask."""
    if value is None:
        return "None"
    if isinstance(value, np.ndarray):
        return f"the array {np.array2string(value, threshold=8)}"
    if getattr(value, "type_name", "") == "ndarray":  # an Opaque stand-in: not numbers
        return "an array of Python objects (dtype=object, what numpy makes of None and a mask)"
    if hasattr(value, "type_name"):
        return f"a {value.type_name} ({value.text[:60]})"
    return repr(value)[:80]


def check_combined(lesson, masks, *, what=None, dims=None):
    """Call combine_masks(*masks) and compare with the loop, naming the classic mistakes."""
    what = what or describe(masks)
    actual = combined(lesson, *masks)
    expected = combine_loop(*masks)
    dims = dims or " ".join(["B", "T", "S"][3 - expected.ndim :])
    if not isinstance(actual, np.ndarray) and any(m is None for m in masks):
        raise AssertionError(f"{what} returned {shown(actual)}, not a boolean mask. {NONE_SKIPPED}.")
    check_mask(actual, expected, what=what, dims=dims, mistakes=combine_mistakes(*masks))
    return actual


def letters(mask):
    """A small mask as [[T, F], ...]."""
    return str(np.where(mask, "T", "F").tolist()).replace("'", "")


def random_mask(r, shape):
    return r.random(shape) < 0.6


@exercise("combine_masks")
class TestCombineMasks:
    def test_causal_and_padding_combine_to_b_t_s(self, lesson):
        """causal (T, S) and padding (B, 1, S) masks combine to (B, T, S)"""
        # Under an instructor's secret: the sequences' lengths reordered.
        lengths = np.array([3, 7, 5])[variation("causal and padding").permutation(B)]
        check_combined(
            lesson,
            (causal_loop(T, S), padding_loop(lengths, S)),
            what="combine_masks(causal (T, S), padding (B, 1, S))",
        )

    @hand_checked
    def test_combine_masks_small_case_by_hand(self, lesson):
        """two (2, 2) masks by hand: True only where both are True"""
        # Under an instructor's secret: the rows and the columns of every mask reordered.
        var = variation("combine_masks by hand")
        rows, cols = var.permutation(2), var.permutation(2)
        m1 = np.array([[True, False], [True, True]])[rows][:, cols]
        m2 = np.array([[True, True], [False, True]])[rows][:, cols]
        # and: [[T, F], [F, T]]; or would give all True
        expected = np.array([[True, False], [False, True]])[rows][:, cols]
        check_mask(
            combined(lesson, m1, m2),
            expected,
            what=f"combine_masks({letters(m1)}, {letters(m2)})",
            dims="T S",
            mistakes={COMBINE_OR: np.ones((2, 2), bool), COMBINE_FLIPPED: ~expected},
        )

    def test_combine_masks_skips_none_entries(self, lesson):
        """None entries are skipped"""
        r = rng(1)
        m1, m2 = random_mask(r, (B, T, S)), random_mask(r, (T, S))
        check_combined(lesson, (None, m1, None))
        check_combined(lesson, (m1, None, m2))

    @enumerable("its only inputs are None entries, or none at all: nothing to vary")
    def test_combine_masks_of_no_mask_is_none(self, lesson):
        """with no mask at all (only None, or nothing) the result is None"""
        for masks in ((None, None), (None,), ()):
            what = describe(masks)
            out = combined(lesson, *masks)
            assert out is None, (
                f"{what} returned {shown(out)}; with no mask at all it must return None, which "
                "scaled_dot_product_attention reads as 'attend everywhere' (there is no shape to "
                "build an all-True mask with)."
            )

    def test_a_single_mask_comes_back_as_it_is(self, lesson):
        """a single mask comes back as it is"""
        check_combined(
            lesson, (random_mask(rng(2), (B, 1, S)),), what="combine_masks(m) with one (B, 1, S) mask"
        )

    def test_three_masks_broadcast_together(self, lesson):
        """(T, S), (B, 1, S) and (B, T, S) masks broadcast together"""
        masks = (causal_loop(T, S), padding_loop([2, 6, 7], S), random_mask(rng(3), (B, T, S)))
        check_combined(lesson, masks, what="combine_masks((T, S), (B, 1, S), (B, T, S))")

    def test_combine_masks_leaves_its_inputs_unchanged(self, lesson):
        """combine_masks leaves its input masks unchanged"""
        r = rng(4)
        masks = (random_mask(r, (B, T, S)), random_mask(r, (T, S)))
        check_combined(lesson, masks, what="combine_masks(m1 (B, T, S), m2 (T, S))")
        check_not_modified(lesson, "combine_masks(m1, m2)")

    @given(
        n=st.integers(1, 3),
        b=st.integers(1, 3),
        t=st.integers(1, 4),
        s=st.integers(1, 5),
        nones=st.integers(0, 2),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_combine_masks_matches_the_loop_for_any_broadcastable_masks(
        self, lesson, n, b, t, s, nones, seed
    ):
        """combine_masks matches the loop for any broadcastable masks and Nones"""
        # Under an instructor's secret: b, t and s grown by c, beyond every public call.
        c = variation("combine_masks for any masks").integers(5, 9, 0)
        b, t, s = b + c, t + c, s + c
        r = rng(seed)
        shapes = [(b, t, s), (t, s), (b, 1, s), (1, t, s), (b, t, 1), (s,)]
        masks = [random_mask(r, shapes[r.integers(len(shapes))]) for _ in range(n)]
        for _ in range(nones):
            masks.insert(int(r.integers(len(masks) + 1)), None)
        check_combined(lesson, tuple(masks))
