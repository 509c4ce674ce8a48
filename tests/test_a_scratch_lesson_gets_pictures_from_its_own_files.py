"""Lesson 99 added to a copy of the course with lesson-owned files only (catalog entry, skeleton,
solution, grading test, pictures module): it gets an attention map, a shape trace under a failed
check, and a figure, without a line of engine or renderer code changed."""

import filecmp
import re
from pathlib import Path

import pytest

from tests.course_copy import REPO, copy_course, course, ready_workspace

CATALOG_ENTRY = """
[[lessons]]
id = "99"
module = "l99_scratch"
title = "A scratch lesson: per-head self-attention weights"
goals = ["Project, split into heads and attend, with your own earlier lessons."]

[[lessons.exercises]]
name = "self_attention_weights"
summary = "self_attention_weights(x, w_q, w_k, n_heads, mask=None) -> (B, H, T, T)."
hints = ["split_heads(x @ w_q, n_heads), the same for the keys, then scaled_dot_product_attention."]
"""

HEADER = '''"""Lesson 99: self-attention weights per head, from your lessons 3 and 5."""

import numpy as np
from l03_attention import scaled_dot_product_attention
from l05_heads import split_heads


def self_attention_weights(x, w_q, w_k, n_heads, mask=None):
    """(B, T, D) -> the weights (B, H, T, T) of queries x @ w_q over keys x @ w_k."""
'''
SKELETON = HEADER + "    raise NotImplementedError\n"
SOLUTION = (
    HEADER
    + """    q = split_heads(x @ w_q, n_heads)  # (B, T, D) -> (B, H, T, K)
    k = split_heads(x @ w_k, n_heads)  # (B, T, D) -> (B, H, T, K)
    _, weights = scaled_dot_product_attention(q, k, k, mask)
    return weights
"""
)
BROKEN = SOLUTION.replace(  # q and k moved back to (B, T, H, K): attention over the heads
    "_, weights = scaled_dot_product_attention(q, k, k, mask)",
    "q, k = np.swapaxes(q, 1, 2), np.swapaxes(k, 1, 2)\n"
    "    _, weights = scaled_dot_product_attention(q, k, k, None)",
)

GRADING_TEST = '''"""Grading tests for lesson 99 (l99_scratch): self_attention_weights against a loop."""

import math

import numpy as np

from course.engine.testing.compare import check_array, exercise


def weights_loop(x, w_q, w_k, n_heads, mask):
    q, k = x @ w_q, x @ w_k
    b_, t_, d_ = x.shape
    k_ = d_ // n_heads
    out = np.zeros((b_, n_heads, t_, t_))
    for b in range(b_):
        for h in range(n_heads):
            cols = slice(h * k_, (h + 1) * k_)
            for i in range(t_):
                scores = [float(q[b, i, cols] @ k[b, j, cols]) / math.sqrt(k_) if mask[i, j] else -math.inf
                          for j in range(t_)]
                top = max(scores)
                exps = [math.exp(s - top) if s > -math.inf else 0.0 for s in scores]
                out[b, h, i] = [e / sum(exps) for e in exps]
    return out


@exercise("self_attention_weights")
class TestSelfAttentionWeights:
    def test_the_weights_equal_a_loop_over_heads_and_positions(self, lesson):
        rng = np.random.default_rng(0)
        x, w_q, w_k = rng.standard_normal((2, 3, 8)), rng.standard_normal((8, 8)), rng.standard_normal((8, 8))
        mask = np.tril(np.ones((3, 3), dtype=bool))
        check_array(
            lesson.self_attention_weights(x, w_q, w_k, 2, mask),
            weights_loop(x, w_q, w_k, 2, mask),
            what="self_attention_weights(x (2, 3, 8), w_q, w_k, 2, causal mask)",
            dims="B H T S",
        )
'''


def documented_pictures_module() -> str:
    """The complete pictures module of docs/adding_a_lesson.md ("## Pictures"): the recipe's
    example is the module this test runs, so it cannot go stale."""
    section = (REPO / "docs" / "adding_a_lesson.md").read_text().split("## Pictures", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    root = copy_course(tmp_path_factory.mktemp("scratch") / "copy")
    with open(root / "course" / "content" / "catalog.toml", "a", encoding="utf-8") as catalog:
        catalog.write(CATALOG_ENTRY)
    (root / "lessons" / "l99_scratch.py").write_text(SKELETON)
    (root / "solutions" / "l99_scratch.py").write_text(SOLUTION)
    (root / "tests" / "lessons" / "test_l99_scratch.py").write_text(GRADING_TEST)
    (root / "tests" / "lessons" / "pictures_l99_scratch.py").write_text(documented_pictures_module())
    return root, ready_workspace(root)


def test_no_engine_renderer_or_cli_file_was_touched(scratch):
    root, _ = scratch
    for part in ("engine", "render", "cli"):
        compared = filecmp.dircmp(REPO / "course" / part, root / "course" / part, ignore=["__pycache__"])
        assert not compared.diff_files and not compared.left_only and not compared.right_only
    assert not filecmp.cmpfiles(
        REPO / "course", root / "course", ["progress.py", "catalog.py"], shallow=False
    )[1]


def test_the_scratch_lesson_passes_and_draws_its_map_and_its_figures(scratch):
    root, workspace = scratch
    assert course(root, "check", "99", cwd=workspace).returncode == 0
    done = course(root, "show", "99", "--map", cwd=workspace)
    out = done.stdout
    assert done.returncode == 0, done.stderr[-2000:]
    assert "─ head 0 ─" in out and "─ head 1 ─" in out and "head 2" not in out
    assert "yours" in out and "Every row sums to 1 and stays within the mask." in out
    assert "confidence per head" in out and "largest weight by query position" in out
    table = re.findall(r"^ +(\d) │ +(\d\.\d{3}) *$", out, flags=re.MULTILINE)  # head │ confidence
    assert [head for head, _ in table] == ["0", "1"] and all(0.0 < float(c) <= 1.0 for _, c in table)
    assert "● head 0   ▲ head 1" in out and "query position" in out
    # query 0 sees one key, so its largest weight is 1: the top row, labelled 1, first column
    lines = out.splitlines()
    top = lines[lines.index("largest weight") + 1]  # the y label, then the plot's top row
    assert float(top.split("│")[0]) == 1.0
    assert top.split("│")[1][:4].strip() in ("●", "▲", "●▲")


def test_a_broken_scratch_lesson_shows_its_shape_trace_with_its_own_sizes(scratch):
    root, workspace = scratch
    (workspace / "l99_scratch.py").write_text(BROKEN)
    try:
        done = course(root, "check", "99", cwd=workspace)
    finally:
        (workspace / "l99_scratch.py").write_text(SOLUTION)
    flat = " ".join(done.stdout.split())
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Shapes through your code (B=3 T=5 H=2 K=4 D=8)" in flat
    assert "scaled_dot_product_attention gave (B, T, H, K) where (B, H, T, K) was expected" in flat
    assert "a transpose is missing" in flat


def test_the_scratch_lessons_files_are_its_own(scratch):
    root, _ = scratch
    added = sorted(str(p.relative_to(root)) for p in root.rglob("*l99_scratch*"))
    assert added == [
        "lessons/l99_scratch.py",
        "solutions/l99_scratch.py",
        "tests/lessons/pictures_l99_scratch.py",
        "tests/lessons/test_l99_scratch.py",
    ]
    assert Path(root / "course" / "content" / "catalog.toml").read_text().count('module = "l99_scratch"') == 1
