"""Grading tests for lesson 1 (l01_projections): linear, head_projections, fuse_head_weights.

Sizes are all different (B=2, T=3, D=4, d_out=5, H=3, K=6) so that a swapped axis, a transpose
or a mixed-up head shows as a wrong shape or wrong numbers instead of passing by coincidence.
"""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from course.engine.testing import (
    Mistake,
    check_array,
    check_not_modified,
    exercise,
    hand_checked,
    rng,
    variation,
)

B, T, D, D_OUT, H, K = 2, 3, 4, 5, 3, 6

# ---------------------------------------------------------------- classic mistakes, by name
W_TRANSPOSED = Mistake("w-transposed", "w.T was used instead of w", exercises=("linear",))
W_TRANSPOSED_SQUARE = Mistake(
    "w-transposed",
    "w.T was used instead of w (weights are stored (d_in, d_out) and applied as x @ w)",
    exercises=("linear",),
)
NO_BIAS = Mistake("no-bias", "the bias b is not added", exercises=("linear",))
HEADS_REVERSED = Mistake(
    "heads-reversed", "the heads come out in reverse order", exercises=("head_projections",)
)
HEAD_REVERSED = Mistake(
    "heads-reversed",
    "head {h} holds head {other}'s projection: reversed order",
    exercises=("head_projections",),
)
RESHAPE_NO_TRANSPOSE = Mistake(
    "reshape-without-transpose",
    "the (B, T, H*K) projection was reshaped straight to (B, H, T, K), "
    "without a transpose, so positions and heads got mixed",
    misconception="reshape-without-transpose",
    exercises=("head_projections",),
)
X_AT_W_HEADS = Mistake(
    "x-at-w-heads",
    "`x @ w_heads` does not loop over the heads: matmul broadcasts the leading axes, pairing "
    "batch element b with head b ((B,) against (H,)); give x a head axis first, x[:, None] "
    '(B, 1, T, D) @ w_heads (H, D, K) -> (B, H, T, K), or use np.einsum("btd,hdk->bhtk", x, w_heads)',
    exercises=("head_projections",),
)
# Mistakes that raise instead of returning a wrong answer, named from the learner's code around
# the error (the grading plugin applies these to every check; testing.named_by_code).
CODE_MISTAKES = {X_AT_W_HEADS: r"\bx\s*@\s*w_heads\b(?!\s*\[)|matmul\(\s*x\s*,\s*w_heads\s*\)"}
FUSE_NO_MOVE = Mistake(
    "fuse-without-moving-heads",
    "w_heads was reshaped without moving the head axis first",
    exercises=("fuse_head_weights",),
)
FUSE_NO_MOVE_ROWS = FUSE_NO_MOVE.plus(", so rows of different heads got mixed")
FUSE_INTERLEAVED = Mistake(
    "interleaved-heads",
    "the heads are interleaved (head h in columns h, h+H, ...) instead "
    "of in the block h*K:(h+1)*K: move the head axis next to K, not "
    "after it",
    misconception="interleaved-heads",
    exercises=("fuse_head_weights",),
)
FUSE_ROWS = Mistake(
    "heads-stacked-along-rows",
    "the heads were stacked along the rows (axis 0) instead of side by side along the columns",
    exercises=("fuse_head_weights",),
)


# The letters of each function's array arguments (their last axes), in parameter order: a raw
# numpy error in the learner's code is shown with the shapes of the call in these letters.
DIMS = {
    "linear": {"x": "D", "w": "D D_out", "b": "D_out"},
    "head_projections": {"x": "B T D", "w_heads": "H D K"},
    "fuse_head_weights": {"w_heads": "H D K"},
}


def linear_loop(x, w, b=None):
    """Oracle: one dot product per output number."""
    x2 = x.reshape(-1, x.shape[-1]).astype(np.float64)
    out = np.zeros((x2.shape[0], w.shape[1]))
    for row in range(x2.shape[0]):
        for j in range(w.shape[1]):
            out[row, j] = sum(x2[row, i] * w[i, j] for i in range(w.shape[0]))
            if b is not None:
                out[row, j] += b[j]
    return out.reshape(*x.shape[:-1], w.shape[1])


def heads_loop(x, w_heads):
    """Oracle: head by head, position by position."""
    b_, t_, _ = x.shape
    h_, _, k_ = w_heads.shape
    out = np.zeros((b_, h_, t_, k_))
    for b in range(b_):
        for h in range(h_):
            for t in range(t_):
                out[b, h, t] = x[b, t] @ w_heads[h]
    return out


# ---------------------------------------------------------------- linear
@exercise("linear")
class TestLinear:
    def test_linear_maps_b_t_d_to_b_t_dout(self, lesson):
        """linear(x, w, b) maps x (B, T, D) to (B, T, D_out)"""
        r = rng(1)
        x, w, b = r.standard_normal((B, T, D)), r.standard_normal((D, D_OUT)), r.standard_normal(D_OUT)
        out = lesson.linear(x, w, b)
        check_array(
            out,
            linear_loop(x, w, b),
            what="linear(x, w, b)",
            dims="B T D_out",
            mistakes={W_TRANSPOSED: lambda: x @ w.T + b},
        )

    @hand_checked
    def test_linear_small_case_by_hand(self, lesson):
        """linear([[1, 2]], w, b) by hand is [[11, 22, 38]]"""
        # Under an instructor's secret: x and b scaled by s, the output columns reordered.
        v = variation("linear by hand")
        s, order = v.scale(), v.permutation(3)
        x = np.array([[1.0, 2.0]]) * s  # (1, 2)
        w = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, 3.0]])[:, order]  # (2, 3)
        b = np.array([10.0, 20.0, 30.0])[order] * s
        # [1, 2] @ w = [1, 2, 8]; + b = [11, 22, 38]
        check_array(
            lesson.linear(x, w, b),
            np.array([[11.0, 22.0, 38.0]])[:, order] * s,
            what=f"linear({x.tolist()}, w, b)",
            dims="T D_out",
            mistakes={NO_BIAS: np.array([[1.0, 2.0, 8.0]])[:, order] * s},
        )

    def test_linear_adds_the_bias(self, lesson):
        """linear(x, w, b) adds the bias b to x @ w"""
        r = rng(2)
        x, w, b = r.standard_normal((B, T, D)), r.standard_normal((D, D_OUT)), r.standard_normal(D_OUT) + 3
        check_array(
            lesson.linear(x, w, b),
            linear_loop(x, w, b),
            what="linear(x, w, b)",
            dims="B T D_out",
            mistakes={NO_BIAS: x @ w},
        )

    def test_linear_uses_w_as_stored_not_transposed(self, lesson):
        """a square w is applied as stored, x @ w, not transposed"""
        r = rng(3)
        x, w = r.standard_normal((B, T, D)), r.standard_normal((D, D))  # square: w.T would fit
        check_array(
            lesson.linear(x, w),
            linear_loop(x, w),
            what="linear(x, w) with a square w",
            dims="B T D",
            mistakes={W_TRANSPOSED_SQUARE: x @ w.T},
        )

    def test_linear_without_bias(self, lesson):
        """linear(x, w) and linear(x, w, None) add no bias"""
        r = rng(4)
        x, w = r.standard_normal((T, D)), r.standard_normal((D, D_OUT))
        check_array(lesson.linear(x, w), linear_loop(x, w), what="linear(x, w) with b=None", dims="T D_out")
        check_array(lesson.linear(x, w, None), linear_loop(x, w), what="linear(x, w, None)", dims="T D_out")

    def test_linear_keeps_float32(self, lesson):
        """float32 x, w and b give a float32 result"""
        r = rng(5)
        x = r.standard_normal((B, T, D)).astype(np.float32)
        w = r.standard_normal((D, D_OUT)).astype(np.float32)
        b = r.standard_normal(D_OUT).astype(np.float32)
        check_array(
            lesson.linear(x, w, b),
            linear_loop(x, w, b).astype(np.float32),
            what="linear(x, w, b) in float32",
            dims="B T D_out",
        )

    def test_linear_leaves_its_inputs_unchanged(self, lesson):
        """linear leaves x, w and b unchanged"""
        r = rng(6)
        x, w, b = r.standard_normal((B, T, D)), r.standard_normal((D, D_OUT)), r.standard_normal(D_OUT)
        lesson.linear(x, w, b)
        check_not_modified(lesson, "linear(x, w, b)")

    @given(
        lead=st.lists(st.integers(1, 3), min_size=0, max_size=3),
        d_in=st.integers(1, 5),
        d_out=st.integers(1, 5),
        bias=st.booleans(),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_linear_matches_the_loop_for_any_leading_axes(self, lesson, lead, d_in, d_out, bias, seed):
        """linear matches the loop for any leading axes, with or without b"""
        r = rng(seed)
        x, w = r.standard_normal((*lead, d_in)), r.standard_normal((d_in, d_out))
        b = r.standard_normal(d_out) if bias else None
        dims = " ".join([f"N{i}" for i in range(len(lead))] + ["D_out"])
        check_array(
            lesson.linear(x, w, b),
            linear_loop(x, w, b),
            what=f"linear(x, w, b) with x {x.shape}, w {w.shape}, b {None if b is None else b.shape}",
            dims=dims,
        )


# ---------------------------------------------------------------- head_projections
@exercise("head_projections")
class TestHeadProjections:
    def test_head_projections_shape_is_b_h_t_k(self, lesson):
        """x (B, T, D) and w_heads (H, D, K) give (B, H, T, K)"""
        r = rng(10)
        x, w_heads = r.standard_normal((B, T, D)), r.standard_normal((H, D, K))
        out = lesson.head_projections(x, w_heads)
        fused = np.concatenate(list(w_heads), axis=1)
        check_array(
            out,
            heads_loop(x, w_heads),
            what="head_projections(x, w_heads)",
            dims="B H T K",
            mistakes={
                HEADS_REVERSED: lambda: heads_loop(x, w_heads)[:, ::-1],
                RESHAPE_NO_TRANSPOSE: lambda: (x @ fused).reshape(B, H, T, K),
            },
        )

    @hand_checked
    def test_head_projections_small_case_by_hand(self, lesson):
        """two heads that each pick one feature of x = [[[1, 2]]], by hand"""
        # Under an instructor's secret: x scaled by s, the features swapped.
        v = variation("head_projections by hand")
        s, order = v.scale(), v.permutation(2)
        x = np.array([[[1.0, 2.0]]])[..., order] * s  # (B=1, T=1, D=2)
        w_heads = np.array([[[1.0], [0.0]], [[0.0], [1.0]]])[:, order]  # head 0 reads 1, head 1 reads 2
        expected = np.array([[[[1.0]], [[2.0]]]]) * s  # (1, H=2, 1, K=1)
        check_array(
            lesson.head_projections(x, w_heads),
            expected,
            what=f"head_projections(x={x.tolist()}, w_heads picking one feature each)",
            dims="B H T K",
            mistakes={HEADS_REVERSED: expected[:, ::-1]},
        )

    def test_head_h_is_x_times_its_own_weight(self, lesson):
        """head h is x @ w_heads[h], for every head h"""
        r = rng(11)
        x, w_heads = r.standard_normal((B, T, D)), r.standard_normal((H, D, K))
        out = lesson.head_projections(x, w_heads)
        check_array(out, heads_loop(x, w_heads), what="head_projections(x, w_heads)", dims="B H T K")
        for h in range(H):
            check_array(
                out[:, h],
                x @ w_heads[h],
                what=f"head_projections(x, w_heads)[:, {h}]",
                dims="B T K",
                mistakes={HEAD_REVERSED.format(h=h, other=H - 1 - h): x @ w_heads[H - 1 - h]},
            )

    def test_head_projections_keeps_float32_and_inputs(self, lesson):
        """float32 stays float32, and x and w_heads are left unchanged"""
        r = rng(12)
        x = r.standard_normal((B, T, D)).astype(np.float32)
        w_heads = r.standard_normal((H, D, K)).astype(np.float32)
        out = lesson.head_projections(x, w_heads)
        check_not_modified(lesson, "head_projections(x, w_heads)")
        check_array(
            out,
            heads_loop(x, w_heads).astype(np.float32),
            what="head_projections(x, w_heads) in float32",
            dims="B H T K",
        )

    @given(
        b=st.integers(1, 3),
        t=st.integers(1, 4),
        d=st.integers(1, 5),
        h=st.integers(1, 4),
        k=st.integers(1, 4),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_head_projections_match_the_loop(self, lesson, b, t, d, h, k, seed):
        """head_projections matches the loop for any B, T, D, H and K"""
        r = rng(seed)
        x, w_heads = r.standard_normal((b, t, d)), r.standard_normal((h, d, k))
        check_array(
            lesson.head_projections(x, w_heads),
            heads_loop(x, w_heads),
            what=f"head_projections(x {x.shape}, w_heads {w_heads.shape})",
            dims="B H T K",
        )


# ---------------------------------------------------------------- fuse_head_weights
@exercise("fuse_head_weights")
class TestFuseHeadWeights:
    def test_fused_weight_is_d_by_h_times_k(self, lesson):
        """w_heads (H, D, K) fuses to (D, H*K), the heads side by side"""
        r = rng(20)
        w_heads = r.standard_normal((H, D, K))
        fused = lesson.fuse_head_weights(w_heads)
        expected = np.concatenate(list(w_heads), axis=1)
        check_array(
            fused,
            expected,
            what="fuse_head_weights(w_heads)",
            dims="D HK",
            mistakes={
                FUSE_NO_MOVE_ROWS: lambda: w_heads.reshape(D, H * K),
                FUSE_INTERLEAVED: lambda: np.transpose(w_heads, (1, 2, 0)).reshape(D, H * K),
                FUSE_ROWS: lambda: np.concatenate(list(w_heads), 0),
            },
        )

    @hand_checked
    def test_fused_weight_small_case_by_hand(self, lesson):
        """heads [[1], [2]] and [[3], [4]] fuse to [[1, 3], [2, 4]], by hand"""
        # Under an instructor's secret: every weight scaled by s and shifted by c.
        v = variation("fuse_head_weights by hand")
        s, c = v.scale(), v.shift()
        w_heads = np.array([[[1.0], [2.0]], [[3.0], [4.0]]]) * s + c  # (H=2, D=2, K=1)
        expected = np.array([[1.0, 3.0], [2.0, 4.0]]) * s + c  # column h is head h
        check_array(
            lesson.fuse_head_weights(w_heads),
            expected,
            what=f"fuse_head_weights(w_heads) with heads {w_heads[0].tolist()} and {w_heads[1].tolist()}",
            dims="D HK",
            mistakes={FUSE_NO_MOVE: np.array([[1.0, 2.0], [3.0, 4.0]]) * s + c},
        )

    def test_head_h_owns_columns_h_k_to_h_plus_1_k(self, lesson):
        """head h owns columns h*K:(h+1)*K of the fused weight"""
        r = rng(21)
        x, w_heads = r.standard_normal((B, T, D)), r.standard_normal((H, D, K))
        fused = lesson.fuse_head_weights(w_heads)
        check_array(
            fused, np.concatenate(list(w_heads), axis=1), what="fuse_head_weights(w_heads)", dims="D HK"
        )
        projected = x @ fused
        for h in range(H):
            check_array(
                projected[..., h * K : (h + 1) * K],
                x @ w_heads[h],
                what=f"(x @ fused)[..., {h * K}:{(h + 1) * K}] (head {h}'s columns)",
                dims="B T K",
            )

    def test_fuse_keeps_float32_and_inputs(self, lesson):
        """float32 stays float32, and w_heads is left unchanged"""
        w_heads = rng(22).standard_normal((H, D, K)).astype(np.float32)
        fused = lesson.fuse_head_weights(w_heads)
        check_not_modified(lesson, "fuse_head_weights(w_heads)")
        check_array(
            fused, np.concatenate(list(w_heads), axis=1), what="fuse_head_weights in float32", dims="D HK"
        )

    @given(h=st.integers(1, 4), d=st.integers(1, 5), k=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
    def test_fused_projection_equals_the_head_projections(self, lesson, h, d, k, seed):
        """x @ fused, split back into heads, equals the head projections"""
        r = rng(seed)
        x, w_heads = r.standard_normal((2, 3, d)), r.standard_normal((h, d, k))
        fused = lesson.fuse_head_weights(w_heads)
        check_array(
            fused,
            np.concatenate(list(w_heads), axis=1),
            what=f"fuse_head_weights(w_heads {w_heads.shape})",
            dims="D HK",
        )
        split = (x @ fused).reshape(2, 3, h, k).transpose(0, 2, 1, 3)
        check_array(split, heads_loop(x, w_heads), what="x @ fused, split back into heads", dims="B H T K")
