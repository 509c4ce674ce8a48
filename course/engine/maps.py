"""Attention maps: the learner's attention weights on a small fixed example, beside the
reference weights, with the rows that cannot be right flagged.

The example is a six-token sentence under a causal mask. The learner's functions run in the
worker, as in a check; the reference is computed here by a short trusted implementation. A row
is flagged when it holds NaN, when it does not sum to 1 (a fully masked row must sum to 0), or
when it puts weight on a key the mask forbids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from course.catalog import Lesson
from course.engine import client

TOKENS = ("the", "cat", "sat", "on", "the", "mat")
T = len(TOKENS)
LESSONS_WITH_MAPS = (
    "l03_attention",
    "l04_masks",
    "l05_heads",
    "l06_multi_head",
    "l07_why_heads",
    "l08_gqa",
    "l09_kv_cache",
)
VOCABULARY = ("the", "cat", "sat", "on", "mat")


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

    def wrong(self) -> bool:
        """Whether the maps show a problem: broken rows, or weights unlike the reference."""
        if self.learner is None or self.reference is None:
            return False
        return bool(self.flags) or bool(np.nanmax(np.abs(self.learner - self.reference)) > 1e-6)


def _softmax_rows(scores: np.ndarray) -> np.ndarray:
    top = np.max(scores, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    weights = np.exp(scores - top)
    total = weights.sum(axis=-1, keepdims=True)
    return np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)


def _reference_attention(q: np.ndarray, k: np.ndarray, mask: np.ndarray) -> np.ndarray:
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    return _softmax_rows(np.where(mask, scores, -np.inf))


def _heads(x: np.ndarray, n: int) -> np.ndarray:
    b, t, d = x.shape
    return np.swapaxes(x.reshape(b, t, n, d // n), 1, 2)  # (B, T, D) -> (B, n, T, K)


def _example(lesson: str) -> dict:
    rng = np.random.default_rng(6)
    causal = np.tril(np.ones((T, T), dtype=bool))
    d, h, g = 8, (1 if lesson in ("l03_attention", "l04_masks") else 4), 2
    x = rng.standard_normal((1, T, d))
    params = {
        "w_q": rng.standard_normal((d, d)),
        "w_k": rng.standard_normal((d, d)),
        "w_v": rng.standard_normal((d, d)),
        "w_o": rng.standard_normal((d, d)),
    }
    if lesson in ("l08_gqa", "l09_kv_cache"):
        params["w_k"], params["w_v"] = params["w_k"][:, : g * d // h], params["w_v"][:, : g * d // h]
    return {
        "x": x,
        "params": params,
        "causal": causal,
        "h": h,
        "g": g,
        "q": rng.standard_normal((1, T, 4)),
        "k": rng.standard_normal((1, T, 4)),
        "v": rng.standard_normal((1, T, 4)),
    }


def _reference(lesson: str, e: dict) -> tuple[np.ndarray, list[int] | None]:
    if lesson in ("l03_attention", "l04_masks"):
        return _reference_attention(e["q"], e["k"], e["causal"]), None
    if lesson == "l07_why_heads":
        return _two_head_reference(), None
    if lesson == "l09_kv_cache":
        return _decoded_weights(e, _reference_step), [i // (e["h"] // e["g"]) for i in range(e["h"])]
    x, p, h = e["x"], e["params"], e["h"]
    g = e["g"] if lesson == "l08_gqa" else h
    q, k = _heads(x @ p["w_q"], h), _heads(x @ p["w_k"], g)
    groups = [i // (h // g) for i in range(h)]
    k = k[:, groups]  # repeat-interleave: query head i reads key/value head i // (H // G)
    return _reference_attention(q, k, e["causal"])[0], (groups if lesson == "l08_gqa" else None)


def _two_head_inputs() -> np.ndarray:
    """Lesson 7's input: [one-hot token | one-hot position | zeros], (1, T, 2 (V + L))."""
    v, length = len(VOCABULARY), T
    x = np.zeros((1, T, 2 * (v + length)))
    for t, token in enumerate(TOKENS):
        x[0, t, VOCABULARY.index(token)] = 1.0
        x[0, t, v + t] = 1.0
    return x


def _two_head_reference() -> np.ndarray:
    """Head 0 looks one token back, head 1 two back; a row with no such token spreads evenly
    over the keys it may see (what a score of 0 everywhere gives)."""
    weights = np.zeros((2, T, T))
    for head, offset in enumerate((1, 2)):
        for t in range(T):
            if t >= offset:
                weights[head, t, t - offset] = 1.0
            else:
                weights[head, t, : t + 1] = 1.0 / (t + 1)
    return weights


def _projected(x: np.ndarray, params: dict, name: str) -> np.ndarray:
    bias = params.get(f"b_{name}")
    return x @ params[f"w_{name}"] + (0.0 if bias is None else bias)


def _decoded_weights(e: dict, step: object) -> np.ndarray:
    """Lesson 9: decode the sentence token by token with ``step`` (the learner's decode_step or
    the reference) and read each new query's weights off the key cache it returned."""
    x, p, h, g = e["x"], e["params"], e["h"], e["g"]
    k_width = x.shape[-1] // h
    cache_k = cache_v = np.zeros((1, g, 0, k_width))
    weights = np.zeros((h, T, T))
    for t in range(T):
        _, cache_k, cache_v = step(x[:, t : t + 1], cache_k, cache_v, p, h, g)  # type: ignore[operator]
        if not isinstance(cache_k, np.ndarray) or cache_k.shape != (1, g, t + 1, k_width):
            raise client.LearnerError(
                f"after token {t} the cache_k has shape {getattr(cache_k, 'shape', None)}; "
                f"expected (B, G, S, K) = {(1, g, t + 1, k_width)}."
            )
        q = _heads(_projected(x[:, t : t + 1], p, "q"), h)  # (1, H, 1, K)
        keys = cache_k[:, [i // (h // g) for i in range(h)]]  # (1, H, t+1, K)
        weights[:, t, : t + 1] = _reference_attention(q, keys, np.ones((1, t + 1), bool))[0, :, 0]
    return weights


def _reference_step(x_t, cache_k, cache_v, params, h, g):  # noqa: ANN001, ANN202
    k = _heads(_projected(x_t, params, "k"), g)
    v = _heads(_projected(x_t, params, "v"), g)
    return None, np.concatenate([cache_k, k], axis=2), np.concatenate([cache_v, v], axis=2)


def _learner(lesson: str, e: dict, module: client.LearnerModule) -> np.ndarray:
    if lesson == "l03_attention":
        _, weights = module.scaled_dot_product_attention(e["q"], e["k"], e["v"], e["causal"])
    elif lesson == "l04_masks":
        mask = module.causal_mask(T)
        if not isinstance(mask, np.ndarray) or mask.shape != (T, T):
            raise client.LearnerError(f"causal_mask({T}) did not return a ({T}, {T}) array.")
        return _reference_attention(e["q"], e["k"], mask.astype(bool))
    elif lesson == "l05_heads":  # the reference pipeline, with the learner's head split
        x, p, h = e["x"], e["params"], e["h"]
        q, k = module.split_heads(x @ p["w_q"], h), module.split_heads(x @ p["w_k"], h)
        want = (1, h, T, x.shape[-1] // h)
        for name, value in (("q", q), ("k", k)):
            if not isinstance(value, np.ndarray) or value.shape != want:
                raise client.LearnerError(f"split_heads({name}, {h}) did not return a {want} array.")
        return _reference_attention(q, k, e["causal"])[0]
    elif lesson == "l07_why_heads":
        params = module.two_head_weights(len(VOCABULARY), T)
        if not isinstance(params, dict) or not all(
            isinstance(params.get(f"w_{n}"), np.ndarray) for n in "qk"
        ):
            raise client.LearnerError("two_head_weights did not return a dict with w_q and w_k.")
        x = _two_head_inputs()
        q, k = _heads(_projected(x, params, "q"), 2), _heads(_projected(x, params, "k"), 2)
        return _reference_attention(q, k, e["causal"])[0]
    elif lesson == "l09_kv_cache":
        return _decoded_weights(e, module.decode_step)
    elif lesson == "l06_multi_head":
        _, weights = module.multi_head_attention(e["x"], e["x"], e["params"], e["h"], e["causal"])
    else:
        _, weights = module.grouped_query_attention(e["x"], e["x"], e["params"], e["h"], e["g"], e["causal"])
    weights = np.asarray(weights, dtype=np.float64)
    return weights.reshape(-1, T, T) if weights.size % (T * T) == 0 else weights


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
    """The maps of ``lesson`` (one with attention weights) for the learner's file."""
    maps = AttentionMaps(lesson=lesson.module)
    if lesson.module not in LESSONS_WITH_MAPS:
        maps.problem = f"Lesson {lesson.id} has no attention weights to draw."
        return maps
    example = _example(lesson.module)
    maps.reference, maps.kv_heads = _reference(lesson.module, example)
    maps.allowed = example["causal"]
    module = client.LearnerModule(source_dir, lesson.module)
    try:
        maps.learner = _learner(lesson.module, example, module)
    except client.NotStarted:
        maps.problem = "Your function still raises NotImplementedError: nothing to draw yet."
    except client.LearnerProblem as problem:
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
