"""Build the PyTorch fixtures of lesson 6: tests/lessons/fixtures/l06_multi_head.npz.

The grading tests of lesson 6 must not need torch, yet they should prove that the learner's
multi-head attention is the real thing. This tool runs a few real
``torch.nn.MultiheadAttention(embed_dim=D, num_heads=H, batch_first=True)`` modules in float64
and stores, for each case, everything a test needs to replay it in numpy:

    <case>__in_proj_weight   (3D, D)     state_dict arrays, as PyTorch stores them
    <case>__in_proj_bias     (3D,)       (absent for bias=False)
    <case>__out_proj.weight  (D, D)
    <case>__out_proj.bias    (D,)        (absent for bias=False)
    <case>__n_heads          ()          H
    <case>__x_q              (B, T, D)   the query input
    <case>__x_kv             (B, S, D)   the key/value input (equal to x_q for self-attention)
    <case>__mask             course form: booleans, True = may attend, (B, T, S), (T, S) or
                                         (B, 1, S) (absent when the case has no mask)
    <case>__out              (B, T, D)   PyTorch's output
    <case>__weights          (B, H, T, S) PyTorch's per-head weights (average_attn_weights=False)

and ``cases``, the case names. The biases are drawn at random (PyTorch initialises them to zero,
which would hide a forgotten bias). PyTorch's boolean attn_mask means True = NOT allowed, the
opposite of the course, so the course mask is inverted before it goes in: a (T, S) mask as is, a
(B, T, S) mask repeated per head to (B*H, T, S) (PyTorch's order: index b*H + h), and a (B, 1, S)
padding mask as key_padding_mask (B, S). No query row is fully masked: PyTorch returns NaN there,
where the course returns zeros.

The tool is deterministic (torch.manual_seed): the project test
tests/test_l06_multi_head_solution.py rebuilds the arrays and compares them with the committed file.

    python tools/make_l06_fixtures.py            write the file
    python tools/make_l06_fixtures.py --check    compare with the committed file, write nothing
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "lessons" / "fixtures" / "l06_multi_head.npz"
SEED = 6

# name, batch B, queries T, keys S (None: self-attention), width D, heads H, bias, mask form.
# The sizes of each case are all different from one another, so a swapped axis cannot pass.
CASES = [
    ("self", 3, 5, None, 8, 2, True, None),  # K = 4
    ("cross_batch_mask", 2, 3, 7, 20, 4, True, "B T S"),  # K = 5
    ("cross_no_bias_shared_mask", 3, 4, 6, 10, 2, False, "T S"),  # K = 5
    ("cross_padding", 4, 3, 6, 10, 5, True, "B 1 S"),  # K = 2
]


def _random_mask(torch, shape):
    """Booleans, True = may attend, about 60% True, never a row (last axis) with no True."""
    mask = torch.rand(shape) < 0.6
    first = torch.randint(shape[-1], shape[:-1])  # one key that every row may always see
    mask.scatter_(-1, first.unsqueeze(-1), True)
    return mask


def build() -> dict[str, np.ndarray]:
    """Every fixture array, keyed as in the file."""
    import torch

    torch.manual_seed(SEED)
    arrays: dict[str, np.ndarray] = {"cases": np.array([c[0] for c in CASES])}
    for name, b, t, s, d, h, bias, mask_form in CASES:
        module = torch.nn.MultiheadAttention(
            embed_dim=d, num_heads=h, batch_first=True, bias=bias, kdim=d, vdim=d, dtype=torch.float64
        )
        module.eval()  # no dropout anyway (dropout=0.0); eval makes it explicit
        with torch.no_grad():
            if bias:  # PyTorch starts them at zero: random biases make a forgotten one visible
                module.in_proj_bias.normal_(0.0, 0.5)
                module.out_proj.bias.normal_(0.0, 0.5)
        x_q = torch.randn(b, t, d, dtype=torch.float64) * 2.0  # * 2: a softmax far from uniform
        x_kv = x_q if s is None else torch.randn(b, s, d, dtype=torch.float64) * 2.0
        n_s = x_kv.shape[1]
        mask = None
        kwargs = {}
        if mask_form == "B T S":
            mask = _random_mask(torch, (b, t, n_s))
            kwargs["attn_mask"] = (~mask).repeat_interleave(h, dim=0)  # (B*H, T, S), True = blocked
        elif mask_form == "T S":
            mask = _random_mask(torch, (t, n_s))
            kwargs["attn_mask"] = ~mask  # (T, S), True = blocked
        elif mask_form == "B 1 S":
            mask = _random_mask(torch, (b, 1, n_s))
            kwargs["key_padding_mask"] = ~mask[:, 0]  # (B, S), True = padding, ignored
        with torch.no_grad():
            out, weights = module(x_q, x_kv, x_kv, need_weights=True, average_attn_weights=False, **kwargs)
        for key, value in module.state_dict().items():
            arrays[f"{name}__{key}"] = value.numpy().copy()
        arrays[f"{name}__n_heads"] = np.array(h)
        arrays[f"{name}__x_q"] = x_q.numpy().copy()
        arrays[f"{name}__x_kv"] = x_kv.numpy().copy()
        if mask is not None:
            arrays[f"{name}__mask"] = mask.numpy().copy()
        arrays[f"{name}__out"] = out.numpy().copy()
        arrays[f"{name}__weights"] = weights.numpy().copy()
        assert weights.shape == (b, h, t, n_s) and not torch.isnan(out).any()
    return arrays


def differences(built: dict[str, np.ndarray], path: Path = OUT) -> list[str]:
    """What differs between freshly built arrays and the file at ``path`` ([] = the same)."""
    with np.load(path, allow_pickle=False) as saved:
        stored = {key: saved[key] for key in saved.files}
    problems = [f"missing from the file: {key}" for key in built if key not in stored]
    problems += [f"not built by the tool: {key}" for key in stored if key not in built]
    for key in built.keys() & stored.keys():
        a, b = built[key], stored[key]
        if a.shape != b.shape or a.dtype != b.dtype:
            problems.append(f"{key}: {a.shape} {a.dtype} built, {b.shape} {b.dtype} stored")
        elif a.dtype.kind == "f" and not np.allclose(a, b, rtol=1e-12, atol=1e-12):
            problems.append(f"{key}: values differ by up to {np.abs(a - b).max():.3g}")
        elif a.dtype.kind != "f" and not np.array_equal(a, b):
            problems.append(f"{key}: values differ")
    return sorted(problems)


def main(argv: list[str]) -> int:
    built = build()
    if "--check" in argv:
        problems = differences(built)
        print("\n".join(problems) or f"{OUT} is up to date.")
        return 1 if problems else 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **built)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(CASES)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
