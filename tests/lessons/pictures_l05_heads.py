"""Pictures of lesson 5 (read by course.engine.pictures.load): the trusted four-head pipeline with the
learner's split_heads (a split without its transpose shows in the maps), and the shapes of
split_heads and merge_heads on an example whose sizes all differ."""

import numpy as np

from course.engine.testing import (
    LearnerError,
    maps,
    shapes,
)


def learner(module, e):
    h = e.heads
    q, k = module.split_heads(e.x @ e.params["w_q"], h), module.split_heads(e.x @ e.params["w_k"], h)
    want = (1, h, maps.T, e.x.shape[-1] // h)
    for name, value in (("q", q), ("k", k)):
        if not isinstance(value, np.ndarray) or value.shape != want:
            raise LearnerError(f"split_heads({name}, {h}) did not return a {want} array.")
    return maps.reference_attention(q, k, e.causal)[0]


MAPS = maps.MapPipeline(learner=learner, reference=maps.heads_reference, heads=4)

SIZES = {"B": 7, "T": 3, "S": 5, "H": 4, "K": 6, "D": 24, "G": 2, "GK": 12, "1": 1}


def run(module, ex):
    """No pipeline of earlier lessons here: the lesson's own results are the points."""
    return shapes.direct(module, "split_heads", ex.array("B T D"), ex.size("H")) + shapes.direct(
        module, "merge_heads", ex.array("B H T K")
    )


SHAPES = shapes.ShapePlan(
    sizes=SIZES,
    points=(
        ("q after split", "split_heads", "B H T K"),
        ("concat", "merge_heads", "B T D"),
    ),
    run=run,
)
