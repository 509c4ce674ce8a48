"""Grading tests for lesson 5 (l05_heads): split_heads, merge_heads.

Sizes are all different (B=2, T=3, H=4, K=5, D=H*K=20) so that a swapped axis reads as wrong
letters and a reshape without a transpose, or an interleaved split, gives wrong numbers instead of
passing by coincidence. The expected answers come from slow loops below (one number at a time:
head h, column k reads feature h*K + k); the vectorised lambdas compute the classic WRONG answers,
only to name a mistake when an answer matches one of them.
"""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from course.engine.testing import (
    LearnerError,
    Mistake,
    check_array,
    check_not_modified,
    exercise,
    hand_checked,
    rng,
    variation,
)

B, T, H, K = 2, 3, 4, 5
D = H * K


# The letters of each function's array arguments (their last axes), in parameter order: a raw
# numpy error in the learner's code is shown with the shapes of the call in these letters.
DIMS = {"split_heads": {"x": "B T D"}, "merge_heads": {"x": "B H T K"}}


def affine(v):
    """The array of a list, every number scaled by v.scale() and shifted by v.shift() (the
    array itself without a secret): a hand-checked split or merge stays exact."""
    s, c = v.scale(), v.shift()
    return lambda numbers: np.array(numbers) * s + c


def listed(a):
    """a as nested lists, whole numbers without ".0" (for what= texts)."""
    if np.ndim(a) == 0:
        return f"{float(a):g}"
    return "[" + ", ".join(listed(row) for row in a) + "]"


# ---------------------------------------------------------------- oracles (slow and obvious)
def split_loop(x, n_heads):
    """Oracle: out[b, h, t, k] = x[b, t, h*K + k], one number at a time."""
    b_, t_, d_ = x.shape
    k_ = d_ // n_heads
    out = np.zeros((b_, n_heads, t_, k_), dtype=x.dtype)
    for b in range(b_):
        for h in range(n_heads):
            for t in range(t_):
                for k in range(k_):
                    out[b, h, t, k] = x[b, t, h * k_ + k]
    return out


def merge_loop(x):
    """Oracle: out[b, t, h*K + k] = x[b, h, t, k], one number at a time."""
    b_, h_, t_, k_ = x.shape
    out = np.zeros((b_, t_, h_ * k_), dtype=x.dtype)
    for b in range(b_):
        for h in range(h_):
            for t in range(t_):
                for k in range(k_):
                    out[b, t, h * k_ + k] = x[b, h, t, k]
    return out


# ---------------------------------------------------------------- classic mistakes, by name
SPLIT_NO_TRANSPOSE = Mistake(
    "split-no-transpose",
    "x was reshaped straight to (B, H, T, K) without a transpose, so positions "
    "and heads got mixed: reshape to (B, T, H, K) first, then swap axes 1 and 2",
    misconception="reshape-without-transpose",
    exercises=("split_heads",),
)
SPLIT_INTERLEAVED = Mistake(
    "split-interleaved",
    "interleaved head split (reshape to (B, T, K, H), then move H): head h got "
    "columns h, h+H, h+2H, ... instead of the block h*K:(h+1)*K",
    misconception="interleaved-heads",
    exercises=("split_heads",),
)
SPLIT_NO_SWAP = Mistake(
    "split-no-swap",
    "the head axis was not moved before T: the answer is (B, T, H, K); swap axes 1 and 2 to get (B, H, T, K)",
    exercises=("split_heads",),
)
SPLIT_WRONG_SWAP = Mistake(
    "split-wrong-swap",
    "the wrong axes were moved: (B, T, H, K) must become (B, H, T, K), i.e. swap "
    "axes 1 and 2 (np.swapaxes(x, 1, 2) or np.transpose(x, (0, 2, 1, 3)))",
    exercises=("split_heads",),
)
SPLIT_DOT_T = Mistake(
    "split-dot-t",
    "`.T` was used on a 4-D array: it reverses EVERY axis, (B, T, H, K) -> (K, H, T, B); "
    "use np.swapaxes(x, 1, 2)",
    exercises=("split_heads",),
)
SPLIT_T_AXIS = Mistake(
    "split-t-axis",
    "the wrong axis was split: the positions T were cut into heads instead of the "
    "features D (split the last axis, axis=-1)",
    exercises=("split_heads",),
)
MERGE_NO_TRANSPOSE = Mistake(
    "merge-no-transpose",
    "x was reshaped straight from (B, H, T, K) to (B, T, H*K) without a "
    "transpose, so each row holds several tokens of one head: swap axes 1 and 2 "
    "first, then reshape",
    misconception="reshape-without-transpose",
    exercises=("merge_heads",),
)
MERGE_INTERLEAVED = Mistake(
    "merge-interleaved",
    "interleaved merge (moved to (B, T, K, H) before the reshape): head h landed "
    "in columns h, h+H, h+2H, ... instead of the block h*K:(h+1)*K",
    exercises=("merge_heads",),
)
MERGE_NO_RESHAPE = Mistake(
    "merge-no-reshape",
    "the heads were moved but not reshaped: the answer is (B, T, H, K); reshape it to (B, T, H*K)",
    exercises=("merge_heads",),
)
MERGE_T_AXIS = Mistake(
    "merge-t-axis",
    "the heads were concatenated along the positions T, (B, H*T, K), instead of along "
    "the features: (B, T, H*K)",
    exercises=("merge_heads",),
)

MERGE_REVERSED = Mistake(
    "merge-reversed",
    "the heads were merged in reverse order: head h must fill columns h*K:(h+1)*K, head 0 "
    "first (Concat(head_1, ..., head_H)), not head H-1 first",
    exercises=("merge_heads",),
)


def split_mistakes(x, n_heads):
    """Named wrong splits of x (B, T, D) into n_heads heads."""
    b_, t_, d_ = x.shape
    k_ = d_ // n_heads
    mistakes = {
        SPLIT_NO_TRANSPOSE: lambda: x.reshape(b_, n_heads, t_, k_),
        SPLIT_INTERLEAVED: lambda: x.reshape(b_, t_, k_, n_heads).transpose(0, 3, 1, 2),
        SPLIT_NO_SWAP: lambda: x.reshape(b_, t_, n_heads, k_),
        SPLIT_WRONG_SWAP: lambda: x.reshape(b_, t_, n_heads, k_).transpose(0, 2, 3, 1),
        SPLIT_DOT_T: lambda: x.reshape(b_, t_, n_heads, k_).T,
    }
    if t_ % n_heads == 0:
        mistakes[SPLIT_T_AXIS] = lambda: np.stack(np.split(x, n_heads, axis=1), axis=1)
    return mistakes


def merge_mistakes(x):
    """Named wrong merges of x (B, H, T, K)."""
    b_, h_, t_, k_ = x.shape
    return {
        MERGE_NO_TRANSPOSE: lambda: x.reshape(b_, t_, h_ * k_),
        MERGE_INTERLEAVED: lambda: x.transpose(0, 2, 3, 1).reshape(b_, t_, h_ * k_),
        MERGE_NO_RESHAPE: lambda: np.swapaxes(x, 1, 2),
        MERGE_T_AXIS: lambda: np.concatenate([x[:, h] for h in range(h_)], axis=1),
        MERGE_REVERSED: lambda: np.swapaxes(x[:, ::-1], 1, 2).reshape(b_, t_, h_ * k_),
    }


def learner_error(call):
    """The text of the error the learner's code raised in `call()`, or None if it returned."""
    try:
        result = call()
    except LearnerError as exc:  # NotStarted and the like are not LearnerErrors: they pass through
        return str(exc), None
    return None, result


# ---------------------------------------------------------------- split_heads
@exercise("split_heads")
class TestSplitHeads:
    def test_split_heads_maps_b_t_d_to_b_h_t_k(self, lesson):
        """split_heads maps (B, T, D) to (B, H, T, K)"""
        x = rng(1).standard_normal((B, T, D))
        check_array(
            lesson.split_heads(x, H),
            split_loop(x, H),
            what=f"split_heads(x {x.shape}, {H})",
            dims="B H T K",
            mistakes=split_mistakes(x, H),
        )

    @hand_checked
    def test_split_heads_small_case_by_hand(self, lesson):
        """a small case checked by hand (B=1, T=2, D=4, H=2 heads of K=2)"""
        # Under an instructor's secret: every number scaled by s and shifted by c.
        moved = affine(variation("split_heads by hand"))
        x = moved([[[0.0, 1.0, 2.0, 3.0], [10.0, 11.0, 12.0, 13.0]]])  # (B=1, T=2, D=4), H=2 heads of K=2
        # head 0 owns columns 0:2 of both tokens, head 1 columns 2:4
        expected = moved([[[[0.0, 1.0], [10.0, 11.0]], [[2.0, 3.0], [12.0, 13.0]]]])  # (1, 2, 2, 2)
        check_array(
            lesson.split_heads(x, 2),
            expected,
            what=f"split_heads({listed(x)}, 2)",
            dims="B H T K",
            mistakes={
                SPLIT_NO_TRANSPOSE: moved([[[[0.0, 1.0], [2.0, 3.0]], [[10.0, 11.0], [12.0, 13.0]]]]),
                SPLIT_INTERLEAVED: moved([[[[0.0, 2.0], [10.0, 12.0]], [[1.0, 3.0], [11.0, 13.0]]]]),
                **split_mistakes(x, 2),
            },
        )

    def test_head_h_owns_columns_h_k_to_h_plus_1_k(self, lesson):
        """head h owns columns h*K:(h+1)*K of x"""
        x = rng(2).standard_normal((B, T, D))
        out = lesson.split_heads(x, H)
        check_array(
            out,
            split_loop(x, H),
            what=f"split_heads(x {x.shape}, {H})",
            dims="B H T K",
            mistakes=split_mistakes(x, H),
        )
        for h in range(H):
            check_array(
                out[:, h],
                x[..., h * K : (h + 1) * K],
                what=f"split_heads(x, {H})[:, {h}] (head {h} must be columns {h * K}:{(h + 1) * K} of x)",
                dims="B T K",
            )

    def test_split_heads_cuts_the_features_not_the_positions(self, lesson):
        """split_heads cuts the features D, not the positions T"""
        x = rng(3).standard_normal((2, 8, 12))  # T = 8 is divisible by H = 4 as well as D = 12
        check_array(
            lesson.split_heads(x, 4),
            split_loop(x, 4),
            what="split_heads(x (2, 8, 12), 4)",
            dims="B H T K",
            mistakes=split_mistakes(x, 4),
        )

    def test_split_heads_rejects_d_not_divisible_by_h(self, lesson):
        """D = 10, H = 4 raises a ValueError that names 10 and 4"""
        x = rng(4).standard_normal((2, 3, 10))
        message, result = learner_error(lambda: lesson.split_heads(x, 4))
        what = "split_heads(x (2, 3, 10), 4)"
        if message is None:
            got = f"an array of shape {result.shape}" if isinstance(result, np.ndarray) else repr(result)
            raise AssertionError(
                f"{what} returned {got[:80]}; it must raise a ValueError, since D = 10 "
                "is not divisible by H = 4 (no whole head width K exists)."
            )
        lines = message.splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith("ValueError")), None)
        assert start is not None, (
            f"{what} raised {lines[-1][:160]}\nRaise a ValueError instead (`raise ValueError(...)`; "
            "not assert, which disappears when Python runs with -O)."
        )
        text = "\n".join(lines[start:]).removeprefix("ValueError").lstrip(": ")
        assert "cannot reshape" not in text, (
            f"{what} raised numpy's own error (ValueError: {text[:120]}). Check D % H yourself "
            "before the reshape and raise a ValueError that names both numbers (D = 10 and H = 4)."
        )
        assert "10" in text and "4" in text, (
            f"{what} raised ValueError: {text[:160]}\nThe message must name both numbers that "
            "disagree, D = 10 and H = 4, so the caller knows what to fix."
        )

    def test_split_heads_keeps_float32_and_its_input(self, lesson):
        """split_heads keeps float32 and leaves its input unchanged"""
        x = rng(5).standard_normal((B, T, D)).astype(np.float32)
        out = lesson.split_heads(x, H)
        check_not_modified(lesson, f"split_heads(x, {H})")
        check_array(
            out,
            split_loop(x, H),
            what=f"split_heads(x, {H}) in float32",
            dims="B H T K",
            mistakes=split_mistakes(x, H),
        )

    def test_split_heads_undoes_a_correct_merge(self, lesson):
        """split_heads undoes a correct merge_heads"""
        heads = rng(6).standard_normal((B, H, T, K))
        check_array(
            lesson.split_heads(merge_loop(heads), H),
            heads,
            what=f"split_heads(merge_heads(heads), {H}) with heads (B, H, T, K) = {heads.shape}",
            dims="B H T K",
            mistakes=split_mistakes(merge_loop(heads), H),
        )

    @given(
        b=st.integers(1, 3),
        t=st.integers(1, 4),
        h=st.integers(1, 4),
        k=st.integers(1, 4),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_split_heads_matches_the_loop(self, lesson, b, t, h, k, seed):
        """split_heads matches the slow loop for any B, T, H, K"""
        x = rng(seed).standard_normal((b, t, h * k))
        out = lesson.split_heads(x, h)
        check_array(
            out,
            split_loop(x, h),
            what=f"split_heads(x {x.shape}, {h})",
            dims="B H T K",
            mistakes=split_mistakes(x, h),
        )
        for head in range(h):
            check_array(
                out[:, head],
                x[..., head * k : (head + 1) * k],
                what=f"split_heads(x {x.shape}, {h})[:, {head}]",
                dims="B T K",
            )


# ---------------------------------------------------------------- merge_heads
@exercise("merge_heads")
class TestMergeHeads:
    def test_merge_heads_maps_b_h_t_k_to_b_t_hk(self, lesson):
        """merge_heads maps (B, H, T, K) to (B, T, H*K)"""
        x = rng(10).standard_normal((B, H, T, K))
        check_array(
            lesson.merge_heads(x),
            merge_loop(x),
            what=f"merge_heads(x {x.shape})",
            dims="B T HK",
            mistakes=merge_mistakes(x),
        )

    @hand_checked
    def test_merge_heads_small_case_by_hand(self, lesson):
        """a small case checked by hand (B=1, H=2, T=2, K=2)"""
        # Under an instructor's secret: every number scaled by s and shifted by c.
        moved = affine(variation("merge_heads by hand"))
        x = moved([[[[0.0, 1.0], [10.0, 11.0]], [[2.0, 3.0], [12.0, 13.0]]]])  # (B=1, H=2, T=2, K=2)
        # token t's row is head 0's row t, then head 1's row t
        expected = moved([[[0.0, 1.0, 2.0, 3.0], [10.0, 11.0, 12.0, 13.0]]])  # (1, 2, 4)
        check_array(
            lesson.merge_heads(x),
            expected,
            what=f"merge_heads(heads {listed(x[0])})",
            dims="B T HK",
            mistakes={
                MERGE_NO_TRANSPOSE: moved([[[0.0, 1.0, 10.0, 11.0], [2.0, 3.0, 12.0, 13.0]]]),
                MERGE_INTERLEAVED: moved([[[0.0, 2.0, 1.0, 3.0], [10.0, 12.0, 11.0, 13.0]]]),
                **merge_mistakes(x),
            },
        )

    def test_merge_heads_is_the_concat_of_the_heads(self, lesson):
        """merge_heads is Concat(head_1, ..., head_H) along the features"""
        x = rng(11).standard_normal((B, H, T, K))
        out = lesson.merge_heads(x)
        check_array(
            out,
            np.concatenate([x[:, h] for h in range(H)], axis=-1),
            what="merge_heads(x), which must equal Concat(head_1, ..., head_H) along the features",
            dims="B T HK",
            mistakes=merge_mistakes(x),
        )
        for h in range(H):
            check_array(
                out[..., h * K : (h + 1) * K],
                x[:, h],
                what=f"merge_heads(x)[..., {h * K}:{(h + 1) * K}] (must be head {h})",
                dims="B T K",
            )

    def test_merge_heads_keeps_float32_and_its_input(self, lesson):
        """merge_heads keeps float32 and leaves its input unchanged"""
        x = rng(12).standard_normal((B, H, T, K)).astype(np.float32)
        out = lesson.merge_heads(x)
        check_not_modified(lesson, "merge_heads(x)")
        check_array(
            out, merge_loop(x), what="merge_heads(x) in float32", dims="B T HK", mistakes=merge_mistakes(x)
        )

    def test_merge_heads_undoes_a_correct_split(self, lesson):
        """merge_heads undoes a correct split_heads"""
        x = rng(13).standard_normal((B, T, D))
        check_array(
            lesson.merge_heads(split_loop(x, H)),
            x,
            what=f"merge_heads(split_heads(x, {H})) with x (B, T, D) = {x.shape}, which must give x back",
            dims="B T D",
            mistakes=merge_mistakes(split_loop(x, H)),
        )

    @given(
        b=st.integers(1, 3),
        h=st.integers(1, 4),
        t=st.integers(1, 4),
        k=st.integers(1, 4),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_merge_heads_matches_the_loop(self, lesson, b, h, t, k, seed):
        """merge_heads matches the slow loop for any B, H, T, K"""
        x = rng(seed).standard_normal((b, h, t, k))
        check_array(
            lesson.merge_heads(x),
            merge_loop(x),
            what=f"merge_heads(x {x.shape})",
            dims="B T HK",
            mistakes=merge_mistakes(x),
        )

    @given(
        b=st.integers(1, 3),
        t=st.integers(1, 4),
        h=st.integers(1, 4),
        k=st.integers(1, 4),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_merge_heads_round_trips_with_split(self, lesson, b, t, h, k, seed):
        """merge_heads(split_heads(x, H)) gives x back for any sizes"""
        x = rng(seed).standard_normal((b, t, h * k))
        check_array(
            lesson.merge_heads(split_loop(x, h)),
            x,
            what=f"merge_heads(split_heads(x {x.shape}, {h}))",
            dims="B T D",
            mistakes=merge_mistakes(split_loop(x, h)),
        )
