"""Lesson 13's solution against PyTorch and against the solutions of lessons 2 and 3.

online_softmax_attention must give torch.nn.functional.scaled_dot_product_attention's output
(boolean attn_mask, True = may attend; an explicit scale) wherever a query row has at least one
key it may see: torch's answer for a fully masked row depends on its version (zeros in 2.13 on
CPU, NaN before), so those rows are compared with lesson 3's zeros only. The tests against
torch skip without torch; the ones against lessons 2 and 3 always run.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import import_lessons

B, H, T, S, K, KV = 2, 3, 7, 13, 5, 4


@pytest.fixture(scope="module")
def sol():
    """The solutions of lessons 2, 3 and 13, imported by module name from solutions/."""
    return dict(
        zip(
            ("l02", "l03", "l13"),
            import_lessons("l02_softmax", "l03_attention", "l13_online_softmax"),
            strict=True,
        )
    )


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def qkv(seed, lead=(B, H), t=T, s=S, dtype=np.float64):
    r = np.random.default_rng(seed)
    q = (r.standard_normal((*lead, t, K)) * 2.0).astype(dtype)
    k = (r.standard_normal((*lead, s, K)) * 2.0).astype(dtype)
    v = r.standard_normal((*lead, s, KV)).astype(dtype)
    return q, k, v


def torch_out(torch, q, k, v, mask=None, scale=None):
    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(a)) for a in (q, k, v))
    tm = None if mask is None else torch.from_numpy(np.ascontiguousarray(mask))
    return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, scale=scale).numpy()


@pytest.mark.parametrize("block_size", [1, 4, 5, 13, 64])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_online_attention_equals_torch_where_a_row_sees_a_key(sol, torch, block_size, dtype):
    q, k, v = qkv(block_size, dtype=dtype)
    mask = np.random.default_rng(99).random((B, 1, T, S)) < 0.5
    mask[0, 0, 3] = False  # a fully masked row
    for m, scale in ((None, None), (mask, None), (mask, 0.3)):
        out = sol["l13"].online_softmax_attention(q, k, v, m, scale, block_size)
        expected = torch_out(torch, q, k, v, m, scale)
        seen = np.ones((B, H, T), bool) if m is None else np.broadcast_to(m.any(axis=-1), (B, H, T))
        tol = 1e-9 if dtype == np.float64 else 2e-5
        assert out.dtype == dtype
        np.testing.assert_allclose(out[seen], expected[seen], rtol=tol, atol=tol)
        assert (out[~seen] == 0).all()


@pytest.mark.parametrize("block_size", [1, 3, 4, 13, 64])
def test_online_attention_equals_lesson_3_to_rtol_1e_9(sol, block_size):
    q, k, v = qkv(10 + block_size)
    r = np.random.default_rng(block_size)
    masks = [
        None,
        r.random((T, S)) < 0.4,
        np.arange(S)[None, :] >= np.arange(T)[:, None] + 4,
        r.random((B, 1, 1, S)) < 0.5,
    ]
    for mask in masks:
        for scale in (None, 0.8):
            out = sol["l13"].online_softmax_attention(q, k, v, mask, scale, block_size)
            expected = sol["l03"].scaled_dot_product_attention(q, k, v, mask, scale)[0]
            np.testing.assert_allclose(out, expected, rtol=1e-9, atol=1e-12)
            assert not np.isnan(out).any()


def test_leading_axes_and_float32_as_lesson_3(sol):
    q, _, _ = qkv(1, lead=(B, H))
    _, k, v = qkv(2, lead=(1, H))
    for dtype in (np.float64, np.float32):
        a, b, c = (x.astype(dtype) for x in (q, k, v))
        out = sol["l13"].online_softmax_attention(a, b, c, None, None, 4)
        expected = sol["l03"].scaled_dot_product_attention(a, b, c)[0]
        assert out.dtype == expected.dtype == dtype and out.shape == (B, H, T, KV)
        np.testing.assert_allclose(out, expected, rtol=1e-9 if dtype == np.float64 else 2e-5, atol=1e-6)


@pytest.mark.parametrize("block_size", [1, 2, 5, 64])
def test_online_softmax_equals_lesson_2(sol, block_size):
    r = np.random.default_rng(block_size)
    x = r.standard_normal((3, 4, 11)) * 5 + np.linspace(0, 20, 11)
    x[0, 1] = -np.inf
    x[1, 2, :6] = -np.inf
    out = sol["l13"].online_softmax(x, block_size)
    np.testing.assert_allclose(out, sol["l02"].softmax(x), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("bad", [0, -1, 2.5, 4.0, True, "8", None])
def test_a_block_size_that_is_not_a_positive_int_is_refused(sol, bad):
    q, k, v = qkv(3)
    with pytest.raises(ValueError, match="block_size"):
        sol["l13"].online_softmax_attention(q, k, v, block_size=bad)
    with pytest.raises(ValueError, match="block_size"):
        sol["l13"].online_softmax(q, bad)


def test_the_solution_never_makes_a_t_by_s_array(sol, monkeypatch):
    """Every array the blockwise loop makes is at most (T, block_size) or (T, Kv) wide: numpy's
    exp, the largest temporary, never sees S scores of a row at once."""
    q, k, v = qkv(4, lead=(), t=6, s=200)
    widths = []
    real_exp = np.exp

    def exp(x, *args, **kwargs):
        widths.append(np.shape(x)[-1])
        return real_exp(x, *args, **kwargs)

    monkeypatch.setattr(sol["l13"].np, "exp", exp)
    sol["l13"].online_softmax_attention(q, k, v, None, None, 16)
    assert widths and max(widths) <= 16


def test_the_memory_picture_shows_the_online_peak_flat_and_lesson_3s_growing():
    """`course show 13 --map` on the solutions: measured from outside, the online peak stays
    within a few MiB while S grows 16-fold, and lesson 3's grows with its (T, S) arrays."""
    from course.content.catalog import load_catalog
    from course.engine.pictures.figures import LineChart, NumberTable, figures
    from tests.helpers import SOLUTIONS

    made, problem = figures(load_catalog().by_module("l13_online_softmax"), SOLUTIONS)
    assert problem == ""
    table, chart = made
    assert isinstance(table, NumberTable) and isinstance(chart, LineChart)
    if table.columns == ("why",):
        pytest.skip(f"memory cannot be measured here: {table.rows[0][0]}")
    rows = table.rows
    online = [row[3] for row in rows]
    lesson3 = [row[4] for row in rows]
    scores = [row[1] for row in rows]
    assert max(online) - min(online) < 4.0, online
    assert all(b >= s for b, s in zip(lesson3, scores, strict=True)), (lesson3, scores)
    assert lesson3[-1] > 8 * online[-1], (lesson3, online)
