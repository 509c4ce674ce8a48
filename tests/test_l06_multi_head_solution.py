"""Lesson 6's solution against the real thing: torch.nn.MultiheadAttention(batch_first=True).

The grading tests replay PyTorch from a committed fixture file; these tests run PyTorch live (they
skip without torch) and check that the fixture tool still reproduces that file.
"""

from __future__ import annotations

import importlib
import importlib.util

import numpy as np
import pytest

from tests.helpers import REPO, import_lessons

FIXTURES = REPO / "tests" / "lessons" / "fixtures" / "l06_multi_head.npz"
TOOL = REPO / "tools" / "make_l06_fixtures.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("make_l06_fixtures", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sol():
    return import_lessons("l06_multi_head")[0]


# name, B, T, S (None: self-attention), D, H, bias, mask form
CASES = [
    ("self attention", 2, 5, None, 12, 3, True, None),
    ("cross attention", 3, 4, 7, 12, 4, True, None),
    ("cross with a (B, T, S) mask", 2, 3, 6, 10, 5, True, "B T S"),
    ("cross with a (T, S) mask", 3, 4, 6, 8, 2, True, "T S"),
    ("cross with a (B, 1, S) padding mask", 4, 3, 5, 12, 6, True, "B 1 S"),
    ("bias=False with a (B, T, S) mask", 2, 4, 3, 6, 3, False, "B T S"),
    ("one head", 2, 3, 4, 5, 1, True, "B T S"),
]


def run_torch(torch, b, t, s, d, h, bias, mask_form, dtype, seed=0):
    """(course state, x_q, x_kv, course mask, torch out, torch per-head weights)."""
    torch.manual_seed(seed)
    module = torch.nn.MultiheadAttention(
        embed_dim=d, num_heads=h, batch_first=True, bias=bias, kdim=d, vdim=d, dtype=dtype
    )
    with torch.no_grad():
        if bias:
            module.in_proj_bias.normal_(0.0, 0.5)
            module.out_proj.bias.normal_(0.0, 0.5)
    x_q = torch.randn(b, t, d, dtype=dtype) * 2.0
    x_kv = x_q if s is None else torch.randn(b, s, d, dtype=dtype) * 2.0
    n_s = x_kv.shape[1]
    mask, kwargs = None, {}
    if mask_form is not None:
        shape = {"B T S": (b, t, n_s), "T S": (t, n_s), "B 1 S": (b, 1, n_s)}[mask_form]
        mask = torch.rand(shape) < 0.6
        mask[..., 0] |= ~mask.any(dim=-1)  # PyTorch gives NaN for a fully masked row
        if mask_form == "B T S":
            kwargs["attn_mask"] = (~mask).repeat_interleave(h, dim=0)  # True = NOT allowed
        elif mask_form == "T S":
            kwargs["attn_mask"] = ~mask
        else:
            kwargs["key_padding_mask"] = ~mask[:, 0]
    with torch.no_grad():
        out, weights = module(x_q, x_kv, x_kv, need_weights=True, average_attn_weights=False, **kwargs)
    state = {key: value.numpy() for key, value in module.state_dict().items()}
    return (
        state,
        x_q.numpy(),
        x_kv.numpy(),
        None if mask is None else mask.numpy(),
        out.numpy(),
        weights.numpy(),
    )


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_solution_matches_torch_multihead_attention_in_float64(sol, case):
    torch = pytest.importorskip("torch")
    _, b, t, s, d, h, bias, mask_form = case
    state, x_q, x_kv, mask, out, weights = run_torch(torch, b, t, s, d, h, bias, mask_form, torch.float64)
    params = sol.params_from_torch(state, h)
    assert ("b_q" in params) == ("b_o" in params) == bias
    got_out, got_weights = sol.multi_head_attention(x_q, x_kv, params, h, mask=mask)
    assert got_weights.shape == weights.shape == (b, h, t, x_kv.shape[1])
    np.testing.assert_allclose(got_weights, weights, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got_out, out, rtol=1e-9, atol=1e-12)
    loop_out = sol.multi_head_attention_loop(x_q, x_kv, params, h, mask=mask)
    np.testing.assert_allclose(loop_out, out, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("case", CASES[2:4], ids=[c[0] for c in CASES[2:4]])
def test_solution_matches_torch_loosely_in_float32(sol, case):
    torch = pytest.importorskip("torch")
    _, b, t, s, d, h, bias, mask_form = case
    state, x_q, x_kv, mask, out, weights = run_torch(torch, b, t, s, d, h, bias, mask_form, torch.float32)
    params = sol.params_from_torch(state, h)
    got_out, got_weights = sol.multi_head_attention(x_q, x_kv, params, h, mask=mask)
    assert got_out.dtype == got_weights.dtype == np.float32
    np.testing.assert_allclose(got_weights, weights, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_out, out, rtol=1e-4, atol=1e-5)
    loop_out = sol.multi_head_attention_loop(x_q, x_kv, params, h, mask=mask)
    assert loop_out.dtype == np.float32
    np.testing.assert_allclose(loop_out, out, rtol=1e-4, atol=1e-5)


def test_course_params_load_back_into_torch(sol):
    """The conversion is exactly invertible: transpose back, stack Q, K, V, and PyTorch agrees."""
    torch = pytest.importorskip("torch")
    state, x_q, x_kv, _, out, _ = run_torch(torch, 2, 3, 4, 8, 2, True, None, torch.float64, 3)
    params = sol.params_from_torch(state, 2)
    back = {
        "in_proj_weight": np.concatenate([params["w_q"].T, params["w_k"].T, params["w_v"].T]),
        "in_proj_bias": np.concatenate([params["b_q"], params["b_k"], params["b_v"]]),
        "out_proj.weight": params["w_o"].T,
        "out_proj.bias": params["b_o"],
    }
    for key, value in state.items():
        np.testing.assert_array_equal(back[key], value)
    module = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    module.load_state_dict(
        {key: torch.from_numpy(np.ascontiguousarray(value)) for key, value in back.items()}
    )
    with torch.no_grad():
        again, _ = module(torch.from_numpy(x_q), torch.from_numpy(x_kv), torch.from_numpy(x_kv))
    np.testing.assert_allclose(again.numpy(), out, rtol=1e-12, atol=1e-12)


def test_params_from_torch_copies_and_leaves_the_state_alone(sol):
    rng = np.random.default_rng(0)
    state = {
        "in_proj_weight": rng.standard_normal((12, 4)),
        "in_proj_bias": rng.standard_normal(12),
        "out_proj.weight": rng.standard_normal((4, 4)),
        "out_proj.bias": rng.standard_normal(4),
    }
    before = {key: value.copy() for key, value in state.items()}
    params = sol.params_from_torch(state, 2)
    for value in params.values():
        value += 1.0  # must not reach the state
    for key in state:
        np.testing.assert_array_equal(state[key], before[key])


def test_the_fixture_tool_reproduces_the_committed_file():
    pytest.importorskip("torch")
    tool = load_tool()
    assert tool.OUT == FIXTURES
    problems = tool.differences(tool.build(), FIXTURES)
    assert not problems, "run python tools/make_l06_fixtures.py: " + "; ".join(problems[:10])


def test_the_fixture_tool_is_deterministic():
    pytest.importorskip("torch")
    tool = load_tool()
    first, second = tool.build(), tool.build()
    assert first.keys() == second.keys()
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)


def test_the_fixture_file_is_small_and_complete():
    assert FIXTURES.stat().st_size < 100_000
    with np.load(FIXTURES, allow_pickle=False) as saved:
        files = set(saved.files)
        cases = [str(name) for name in saved["cases"]]
        for name in cases:
            for key in ("in_proj_weight", "out_proj.weight", "n_heads", "x_q", "x_kv", "out", "weights"):
                assert f"{name}__{key}" in files, f"{name}__{key}"
            b, t, d = saved[f"{name}__x_q"].shape
            h, s = int(saved[f"{name}__n_heads"]), saved[f"{name}__x_kv"].shape[1]
            assert saved[f"{name}__weights"].shape == (b, h, t, s)
            assert saved[f"{name}__in_proj_weight"].dtype == np.float64
    # what the grading tests rely on: self- and cross-attention with T != S, masks, bias=False
    assert any(saved_case.startswith("self") for saved_case in cases)
    assert any(f"{name}__mask" in files for name in cases)
    assert any(f"{name}__in_proj_bias" not in files for name in cases)


def test_the_solution_reproduces_the_committed_fixtures(sol):
    with np.load(FIXTURES, allow_pickle=False) as saved:
        arrays = {key: saved[key] for key in saved.files}
    for name in arrays["cases"]:
        case = {key.split("__", 1)[1]: value for key, value in arrays.items() if key.startswith(f"{name}__")}
        state = {
            key: case[key]
            for key in ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias")
            if key in case
        }
        h = int(case["n_heads"])
        params = sol.params_from_torch(state, h)
        out, weights = sol.multi_head_attention(case["x_q"], case["x_kv"], params, h, mask=case.get("mask"))
        np.testing.assert_allclose(weights, case["weights"], rtol=1e-9, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(out, case["out"], rtol=1e-9, atol=1e-12, err_msg=name)
