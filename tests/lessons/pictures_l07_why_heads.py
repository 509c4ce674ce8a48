"""Pictures of lesson 7 (read by course.engine.pictures.load): the learner's hand-built two-head
layer on the engine's sentence (head 0 should look one token back, head 1 two back), and the
shapes of the weights two_head_weights builds (D = 2 (V + L) = 22 for V = 5 words, L = 6)."""

import numpy as np

from course.engine.testing import (
    LearnerError,
    LearnerProblem,
    maps,
    shapes,
)

V, L = len(maps.VOCABULARY), maps.T


def inputs():
    """The layer's input: [one-hot token | one-hot position | zeros], (1, T, 2 (V + L))."""
    x = np.zeros((1, maps.T, 2 * (V + L)))
    for t, token in enumerate(maps.TOKENS):
        x[0, t, maps.VOCABULARY.index(token)] = 1.0
        x[0, t, V + t] = 1.0
    return x


def learner(module, e):
    params = module.two_head_weights(V, L)
    if not isinstance(params, dict) or not all(isinstance(params.get(f"w_{n}"), np.ndarray) for n in "qk"):
        raise LearnerError("two_head_weights did not return a dict with w_q and w_k.")
    x = inputs()
    q = maps.split(maps.projected(x, params, "q"), 2)
    k = maps.split(maps.projected(x, params, "k"), 2)
    return maps.reference_attention(q, k, e.causal)[0]


def reference(e):
    """Head 0 looks one token back, head 1 two back; a row with no such token spreads evenly
    over the keys it may see (what a score of 0 everywhere gives)."""
    weights = np.zeros((2, maps.T, maps.T))
    for head, offset in enumerate((1, 2)):
        for t in range(maps.T):
            if t >= offset:
                weights[head, t, t - offset] = 1.0
            else:
                weights[head, t, : t + 1] = 1.0 / (t + 1)
    return weights


MAPS = maps.MapPipeline(learner=learner, reference=reference, heads=2)


def run(module, ex):
    """No pipeline here: the weights the learner builds are the points."""
    try:
        params = module.two_head_weights(V, L)
    except LearnerProblem:
        return [{"function": "two_head_weights"}]
    if not isinstance(params, dict):
        return []
    return [
        {"function": "two_head_weights", "result": [shapes.shape_of(params.get(key))]}
        for key in ("w_q", "w_k", "w_v", "w_o")
    ]


SHAPES = shapes.ShapePlan(
    sizes={"D": 2 * (V + L), "HK": 2 * (V + L)},
    points=(
        ("w_q", "two_head_weights", "D HK"),
        ("w_k", "two_head_weights", "D HK"),
        ("w_v", "two_head_weights", "D HK"),
        ("w_o", "two_head_weights", "HK D"),
    ),
    run=run,
)
