"""Attention maps: the learner's attention weights on a small fixed example, beside the
reference weights, with the rows that cannot be right flagged.

The example is a six-token sentence under a causal mask (``Example``). Which of the learner's
functions make the weights, and what the reference is, belongs to the lesson: its pictures
module declares a ``MapPipeline`` (see ``load``). The learner's functions run in the worker, as
in a check; the reference is computed here by short trusted code. A row is flagged when it
holds NaN, when it does not sum to 1 (a fully masked row must sum to 0), or when it puts weight
on a key the mask forbids.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from course.content.catalog import Lesson
from course.engine.calls import errors, learner_module
from course.engine.pictures import load

TOKENS = ("the", "cat", "sat", "on", "the", "mat")
T = len(TOKENS)
VOCABULARY = ("the", "cat", "sat", "on", "mat")
WIDTH = 8  # the example's model width D


@dataclass(frozen=True)
class Example:
    """The engine's example: the sentence as (1, T, D) inputs, random weights, a causal mask,
    and a bare (1, T, 4) q, k, v for lessons that attend without projections."""

    x: np.ndarray
    params: dict[str, np.ndarray]
    causal: np.ndarray  # (T, T) booleans, True = may attend
    heads: int
    kv_heads: int
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    tokens: tuple[str, ...] = TOKENS

    def groups(self) -> list[int]:
        """The key/value head each query head reads (repeat-interleave, as in lesson 8)."""
        return [i // (self.heads // self.kv_heads) for i in range(self.heads)]


def example(heads: int = 1, kv_heads: int | None = None) -> Example:
    """The example for ``heads`` query heads; with ``kv_heads`` the key and value weights are
    only G*K wide (grouped-query attention)."""
    rng = np.random.default_rng(6)
    d = WIDTH
    x = rng.standard_normal((1, T, d))
    params = {name: rng.standard_normal((d, d)) for name in ("w_q", "w_k", "w_v", "w_o")}
    if kv_heads is not None:
        width = kv_heads * d // heads
        params["w_k"], params["w_v"] = params["w_k"][:, :width], params["w_v"][:, :width]
    q, k, v = (rng.standard_normal((1, T, 4)) for _ in range(3))
    causal = np.tril(np.ones((T, T), dtype=bool))
    return Example(x, params, causal, heads, kv_heads or heads, q, k, v)


@dataclass(frozen=True)
class MapPipeline:
    """What a lesson's attention maps are: ``learner(module, example)`` calls the learner's
    functions (through ``learner_module.LearnerModule``) and returns their weights, (H, T, S) or
    anything of that size; ``reference(example)`` returns the right (H, T, S) weights. A
    ``learner`` that finds the learner's answer unusable raises ``errors.LearnerError`` with a
    sentence for the learner. ``kv_heads`` makes the example grouped-query and shows which
    key/value head each query head reads."""

    learner: Callable[[learner_module.LearnerModule, Example], object]
    reference: Callable[[Example], np.ndarray]
    heads: int = 1
    kv_heads: int | None = None


@dataclass
class AttentionMaps:
    lesson: str
    tokens: tuple[str, ...] = TOKENS
    learner: np.ndarray | None = None  # (H, T, S)
    reference: np.ndarray | None = None  # (H, T, S)
    allowed: np.ndarray | None = None  # (T, S) booleans of the correct mask
    kv_heads: list[int] | None = None  # GQA: the key/value head each query head reads
    problem: str = ""  # why the learner's maps could not be computed
    flags: list[tuple[int, int, str]] = field(default_factory=list)  # (head, row, what)
    figures: list = field(default_factory=list)  # further pictures (figures.Figure)
    figures_problem: str = ""  # why the learner's code could not make them

    def wrong(self) -> bool:
        """Whether the maps show a problem: broken rows, or weights unlike the reference."""
        if self.learner is None or self.reference is None:
            return False
        return bool(self.flags) or bool(np.nanmax(np.abs(self.learner - self.reference)) > 1e-6)


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; a row of -inf only gets zeros."""
    top = np.max(scores, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    weights = np.exp(scores - top)
    total = weights.sum(axis=-1, keepdims=True)
    return np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)


def reference_attention(q: np.ndarray, k: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Trusted attention weights: softmax(q k^T / sqrt(K)) under ``mask`` (True = may attend)."""
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    return softmax_rows(np.where(mask, scores, -np.inf))


def split(x: np.ndarray, n: int) -> np.ndarray:
    """Trusted head split: (B, T, D) -> (B, n, T, D // n)."""
    b, t, d = x.shape
    return np.swapaxes(x.reshape(b, t, n, d // n), 1, 2)  # (B, T, D) -> (B, n, T, K)


def projected(x: np.ndarray, params: dict, name: str) -> np.ndarray:
    """``x @ w_<name> + b_<name>`` (no bias when the params have none)."""
    bias = params.get(f"b_{name}")
    return x @ params[f"w_{name}"] + (0.0 if bias is None else bias)


def heads_reference(e: Example) -> np.ndarray:
    """The (H, T, T) causal weights of the example's projected q and k, key heads repeated."""
    q, k = split(e.x @ e.params["w_q"], e.heads), split(e.x @ e.params["w_k"], e.kv_heads)
    return reference_attention(q, k[:, e.groups()], e.causal)[0]


def flag_rows(weights: np.ndarray, allowed: np.ndarray) -> list[tuple[int, int, str]]:
    """(head, row, what) for every row that cannot be right under the mask ``allowed``."""
    flags = []
    for head in range(weights.shape[0]):
        for row in range(weights.shape[1]):
            values = weights[head, row]
            if np.isnan(values).any():
                flags.append((head, row, "NaN in the row"))
                continue
            if (np.abs(values[~allowed[row]]) > 1e-9).any():
                flags.append((head, row, "weight on a key the mask forbids"))
            want = 1.0 if allowed[row].any() else 0.0
            if abs(values.sum() - want) > 1e-6:
                flags.append((head, row, f"sums to {values.sum():.3f}, not {want:g}"))
    return flags


def attention_maps(lesson: Lesson, source_dir: Path) -> AttentionMaps:
    """The maps of ``lesson`` for the learner's file, as its pictures module asks."""
    maps = AttentionMaps(lesson=lesson.module)
    pipeline = load.part(lesson, "MAPS", MapPipeline)
    if pipeline is None:
        maps.problem = f"Lesson {lesson.id} has no attention weights to draw."
        return maps
    e = example(pipeline.heads, pipeline.kv_heads)
    maps.reference = np.asarray(pipeline.reference(e), dtype=np.float64)
    maps.kv_heads = e.groups() if pipeline.kv_heads is not None else None
    maps.allowed = e.causal
    module = learner_module.LearnerModule(source_dir, lesson.module)
    try:
        weights = np.asarray(pipeline.learner(module, e), dtype=np.float64)
        maps.learner = weights.reshape(-1, T, T) if weights.size % (T * T) == 0 else weights
    except errors.NotStarted:
        maps.problem = "Your function still raises NotImplementedError: nothing to draw yet."
    except errors.LearnerProblem as problem:
        maps.problem = str(problem)
    except (TypeError, ValueError):
        maps.problem = "Your function did not return (out, weights) with weights of the right shape."
    finally:
        module.close()
    if maps.learner is not None and maps.learner.shape != maps.reference.shape:
        maps.problem = (
            f"Your weights have shape {maps.learner.shape}; the map needs "
            f"{maps.reference.shape} (heads, queries, keys)."
        )
        maps.learner = None
    if maps.learner is not None:
        maps.flags = flag_rows(maps.learner, maps.allowed)
    return maps
