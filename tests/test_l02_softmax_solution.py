"""The lesson 2 solution agrees with torch.softmax and torch.logsumexp.

Both are compared in float64 to 1e-9 (and in float32 loosely) along every axis, on ordinary
scores and on logits around +-1000, where a softmax without the maximum subtracted overflows.

Rows of all -inf (every key masked): torch.softmax returns NaN for them, the course returns zeros
(its contract: a fully masked query gets all-zero weights, never NaN). There the solution's rows
are asserted to be exactly zero and the other rows are compared with torch. torch.logsumexp
returns -inf for such a row, as the course does, so logsumexp is compared everywhere.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import import_lessons

torch = pytest.importorskip("torch")

B, H, T, S = 2, 3, 4, 5


@pytest.fixture(scope="module")
def solution():
    return import_lessons("l02_softmax")[0]


def torch_softmax(x, axis):
    return torch.softmax(torch.from_numpy(np.ascontiguousarray(x)), dim=axis).numpy()


def torch_logsumexp(x, axis):
    return torch.logsumexp(torch.from_numpy(np.ascontiguousarray(x)), dim=axis).numpy()


def scores(seed, shape=(B, H, T, S), scale=3.0, dtype=np.float64):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def huge_logits(dtype=np.float64):
    """(B, H, T, S) logits near +1000, near -1000, and mixed (mean near 0) in every row."""
    x = scores(7, scale=2.0)
    x[:, :, 0] += 1000.0
    x[:, :, 1] -= 1000.0
    x[:, :, 2, ::2] += 1000.0
    x[:, :, 2, 1::2] -= 1000.0
    return x.astype(dtype)


def assert_close(actual, expected, dtype=np.float64):
    assert actual.dtype == dtype, f"dtype {actual.dtype}, expected {dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape}, expected {expected.shape}"
    if dtype == np.float64:
        np.testing.assert_allclose(actual, expected, rtol=1e-9, atol=1e-9)
    else:
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


AXES = [0, 1, 2, 3, -1, -2, -3, -4]


@pytest.mark.parametrize("axis", AXES)
def test_softmax_matches_torch_softmax_along_every_axis(solution, axis):
    x = scores(1)
    assert_close(solution.softmax(x, axis=axis), torch_softmax(x, axis))


@pytest.mark.parametrize("axis", AXES)
def test_logsumexp_matches_torch_logsumexp_along_every_axis(solution, axis):
    x = scores(2)
    assert_close(solution.logsumexp(x, axis=axis), torch_logsumexp(x, axis))


def test_the_default_axis_is_the_last_one_as_dim_minus_1_in_torch(solution):
    x = scores(3)
    assert_close(solution.softmax(x), torch_softmax(x, -1))
    assert_close(solution.logsumexp(x), torch_logsumexp(x, -1))


@pytest.mark.parametrize("axis", [-1, 0, 2])
def test_softmax_and_logsumexp_match_torch_for_logits_around_plus_minus_1000(solution, axis):
    x = huge_logits()
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # underflow to 0 is fine
        weights, lse = solution.softmax(x, axis=axis), solution.logsumexp(x, axis=axis)
    assert np.isfinite(weights).all() and np.isfinite(lse).all()
    assert_close(weights, torch_softmax(x, axis))
    assert_close(lse, torch_logsumexp(x, axis))


@pytest.mark.parametrize("axis", [-1, 1])
def test_float32_matches_torch_loosely_and_stays_float32(solution, axis):
    for x in (scores(4, dtype=np.float32), huge_logits(np.float32), huge_logits(np.float32) / 10):
        assert_close(solution.softmax(x, axis=axis), torch_softmax(x, axis), dtype=np.float32)
        assert_close(solution.logsumexp(x, axis=axis), torch_logsumexp(x, axis), dtype=np.float32)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_an_all_minus_inf_row_is_zeros_where_torch_softmax_gives_nan(solution, dtype):
    x = scores(5, dtype=dtype)
    x[0, 1, 2] = -np.inf  # every key of one query masked
    x[1, 0, 3, [0, 2]] = -np.inf  # some keys of another query masked
    ours, theirs = solution.softmax(x), torch_softmax(x, -1)
    assert (ours[0, 1, 2] == 0).all(), ours[0, 1, 2]
    assert np.isnan(theirs[0, 1, 2]).all() or (theirs[0, 1, 2] == 0).all(), theirs[0, 1, 2]
    defined = np.ones(x.shape[:-1], dtype=bool)
    defined[0, 1, 2] = False
    assert_close(ours[defined], theirs[defined], dtype=dtype)
    assert not np.isnan(ours).any()


def test_an_all_minus_inf_slice_along_axis_0_is_zeros(solution):
    x = scores(6)
    x[:, 1, 2, 3] = -np.inf
    ours, theirs = solution.softmax(x, axis=0), torch_softmax(x, 0)
    assert (ours[:, 1, 2, 3] == 0).all()
    defined = np.isfinite(theirs)
    assert not defined[:, 1, 2, 3].any() or (theirs[:, 1, 2, 3] == 0).all()
    np.testing.assert_allclose(ours[defined], theirs[defined], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_logsumexp_of_an_all_minus_inf_row_is_minus_inf_as_in_torch(solution, dtype):
    x = scores(8, dtype=dtype)
    x[1, 2, 0] = -np.inf
    x[0, 0, 1, [1, 3, 4]] = -np.inf
    with np.errstate(divide="raise", invalid="raise"):
        ours = solution.logsumexp(x)
    assert ours[1, 2, 0] == -np.inf
    assert_close(ours, torch_logsumexp(x, -1), dtype=dtype)  # -inf == -inf counts as equal


def test_logsumexp_of_a_1d_array_is_a_0d_result_like_torch(solution):
    x = scores(9, shape=(S,))
    ours, theirs = solution.logsumexp(x), torch_logsumexp(x, 0)
    assert np.ndim(ours) == 0 and theirs.shape == ()
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-9)


def test_softmax_equals_exp_of_x_minus_logsumexp(solution):
    x = huge_logits()
    for axis in (-1, 1):
        lse = solution.logsumexp(x, axis=axis)
        assert_close(solution.softmax(x, axis=axis), np.exp(x - np.expand_dims(lse, axis)))


def test_the_solution_never_modifies_its_input(solution):
    x = huge_logits()
    x[0, 0, 0] = -np.inf
    before = x.copy()
    for axis in (-1, 0, 2):
        solution.softmax(x, axis=axis)
        solution.logsumexp(x, axis=axis)
    np.testing.assert_array_equal(x, before)
