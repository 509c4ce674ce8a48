"""Shape traces for lessons 5-9: the shapes at the named points of the learner's computation
(projections, split, attention, concat, output; lesson 7: the weights built by hand) beside
the shapes expected there.

The learner's function runs once on an example whose sizes all differ (B=7, T=3, S=5, H=4,
K=6, D=24, G=2), and every call it makes to the learner's earlier lessons is recorded with its
result shapes (see ``client.LearnerFunction.traced``). Expected shapes are data below, written
in dimension letters. A shape that is a permutation of the expected one is named as such: "a
transpose is missing or the axes are in the wrong order".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from course.catalog import Lesson
from course.engine import client

SIZES = {"B": 7, "T": 3, "S": 5, "H": 4, "K": 6, "D": 24, "G": 2, "GK": 12, "1": 1}
# Lesson 7's two-head layer: vocabulary V=5, length L=6, width D7 = 2 (V + L) = 22.
SIZES_L07 = {"D": 22, "HK": 22}
LETTERS = {size: letter for letter, size in SIZES.items()}

# lesson -> [(point, function whose result it is, expected shape)], in the order of the formula
EXPECTED = {
    "l05_heads": [
        ("q after split", "split_heads", "B H T K"),
        ("concat", "merge_heads", "B T D"),
    ],
    "l07_why_heads": [
        ("w_q", "two_head_weights", "D HK"),
        ("w_k", "two_head_weights", "D HK"),
        ("w_v", "two_head_weights", "D HK"),
        ("w_o", "two_head_weights", "HK D"),
    ],
    "l06_multi_head": [
        ("q, k, v after projection", "linear", "B T D"),
        ("", "linear", "B S D"),
        ("", "linear", "B S D"),
        ("q, k, v after split", "split_heads", "B H T K"),
        ("", "split_heads", "B H S K"),
        ("", "split_heads", "B H S K"),
        ("per-head output", "scaled_dot_product_attention", "B H T K"),
        ("weights", "scaled_dot_product_attention", "B H T S"),
        ("concat", "merge_heads", "B T D"),
        ("out", "linear", "B T D"),
    ],
    "l08_gqa": [
        ("q, k, v after projection", "linear", "B T D"),
        ("", "linear", "B S GK"),
        ("", "linear", "B S GK"),
        ("q, k, v after split", "split_heads", "B H T K"),
        ("", "split_heads", "B G S K"),
        ("", "split_heads", "B G S K"),
        ("per-head output", "scaled_dot_product_attention", "B H T K"),
        ("weights", "scaled_dot_product_attention", "B H T S"),
        ("concat", "merge_heads", "B T D"),
        ("out", "linear", "B T D"),
    ],
    "l09_kv_cache": [
        ("q, k, v of the new token", "linear", "B 1 D"),
        ("", "linear", "B 1 GK"),
        ("", "linear", "B 1 GK"),
        ("after split", "split_heads", "B H 1 K"),
        ("", "split_heads", "B G 1 K"),
        ("", "split_heads", "B G 1 K"),
        ("keys, values repeated", "repeat_kv", "B H S K"),
        ("", "repeat_kv", "B H S K"),
        ("per-head output", "scaled_dot_product_attention", "B H 1 K"),
        ("weights", "scaled_dot_product_attention", "B H 1 S"),
        ("concat", "merge_heads", "B 1 D"),
        ("out", "linear", "B 1 D"),
    ],
}


@dataclass
class ShapeTrace:
    rows: list[tuple[str, str, str, str, bool]] = field(default_factory=list)
    # (point, function, expected letters, yours, matches)
    mismatch: str = ""  # one sentence about the first mismatch, or ""


def letters(shape: tuple[int, ...] | list[int] | None, lesson: str = "") -> str:
    if shape is None:
        return "not an array"
    names = {22: "D"} if lesson == "l07_why_heads" else LETTERS
    return "(" + ", ".join(names.get(size, str(size)) for size in shape) + ")"


def _shape(text: str, lesson: str = "") -> tuple[int, ...]:
    sizes = SIZES_L07 if lesson == "l07_why_heads" else SIZES
    return tuple(sizes[letter] for letter in text.split())


def _example(lesson: str) -> tuple[str, tuple]:
    rng = np.random.default_rng(5)
    b, t, s, h, k, d, g = (SIZES[x] for x in "BTSHKDG")
    kv_width = d if lesson == "l06_multi_head" else g * k
    params = {
        "w_q": rng.standard_normal((d, d)),
        "w_k": rng.standard_normal((d, kv_width)),
        "w_v": rng.standard_normal((d, kv_width)),
        "w_o": rng.standard_normal((d, d)),
    }
    if lesson == "l06_multi_head":
        return "multi_head_attention", (
            rng.standard_normal((b, t, d)),
            rng.standard_normal((b, s, d)),
            params,
            h,
        )
    if lesson == "l08_gqa":
        return "grouped_query_attention", (
            rng.standard_normal((b, t, d)),
            rng.standard_normal((b, s, d)),
            params,
            h,
            g,
        )
    cache = rng.standard_normal((b, g, s - 1, k))
    return "decode_step", (rng.standard_normal((b, 1, d)), cache, cache.copy(), params, h, g)


RAISED = ("raised",)  # a recorded call that raised instead of returning


def compare(lesson: str, calls: list[dict]) -> ShapeTrace:
    """Line up the recorded calls with the expected points, function by function."""
    trace = ShapeTrace()
    recorded: dict[str, list[tuple]] = {}
    for call in calls:
        shapes = call["result"] if "result" in call else [RAISED]
        for shape in shapes or [None]:
            value = tuple(shape) if isinstance(shape, (list, tuple)) else ()
            recorded.setdefault(str(call.get("function")), []).append(value)
    unmatched = {name: list(shapes) for name, shapes in recorded.items()}
    for point, function, want in EXPECTED[lesson]:
        expected = _shape(want, lesson)
        left = unmatched.get(function, [])
        if expected in left:
            left.remove(expected)
            trace.rows.append((point, function, letters(expected, lesson), letters(expected, lesson), True))
        elif function not in recorded:
            trace.rows.append((point, function, letters(expected, lesson), "not called", True))
        elif not left:
            trace.rows.append((point, function, letters(expected, lesson), "not reached", True))
        elif left[0] == RAISED:
            left.pop(0)
            trace.rows.append((point, function, letters(expected, lesson), "raised an error", False))
        else:
            yours = left.pop(0)
            shown = letters(yours or None, lesson)
            trace.rows.append((point, function, letters(expected, lesson), shown, False))
            if not trace.mismatch:
                trace.mismatch = (
                    f"{function} gave {letters(yours or None, lesson)} where "
                    f"{letters(expected, lesson)} was expected{_why(yours, expected)}"
                )
    return trace


def _why(yours: tuple, expected: tuple) -> str:
    if len(yours) == len(expected) and sorted(yours) == sorted(expected):
        return ": a transpose is missing, or the axes are in the wrong order."
    return "."


def _direct_calls(lesson: str, module: client.LearnerModule) -> list[dict]:
    """Lessons 5 and 7 have no pipeline of earlier lessons: their own results are the points."""
    calls: list[dict] = []
    rng = np.random.default_rng(5)
    b, t, h, k, d = (SIZES[x] for x in "BTHKD")
    if lesson == "l05_heads":
        for name, args in (
            ("split_heads", (rng.standard_normal((b, t, d)), h)),
            ("merge_heads", (rng.standard_normal((b, h, t, k)),)),
        ):
            try:
                result = getattr(module, name)(*args)
                calls.append({"function": name, "result": [_shape_of(result)]})
            except client.LearnerProblem:
                calls.append({"function": name})
        return calls
    try:
        params = module.two_head_weights(5, 6)
    except client.LearnerProblem:
        return [{"function": "two_head_weights"}]
    if isinstance(params, dict):
        calls = [
            {"function": "two_head_weights", "result": [_shape_of(params.get(key))]}
            for key in ("w_q", "w_k", "w_v", "w_o")
        ]
    return calls


def _shape_of(value: object) -> list[int] | None:
    return list(value.shape) if isinstance(value, np.ndarray) else None


def shape_trace(lesson: Lesson, source_dir: Path) -> ShapeTrace | None:
    """The learner's shape trace for lessons 5-9 (None when the learner's function cannot be
    run at all)."""
    if lesson.module not in EXPECTED:
        return None
    module = client.LearnerModule(source_dir, lesson.module)
    try:
        if lesson.module in ("l05_heads", "l07_why_heads"):
            calls = _direct_calls(lesson.module, module)
        else:
            name, args = _example(lesson.module)
            try:
                getattr(module, name).traced(*args)
            except client.LearnerProblem:
                pass  # the calls made before the failure tell where it went wrong
            calls = module.trace
    finally:
        module.close()
    return compare(lesson.module, calls) if calls else None
