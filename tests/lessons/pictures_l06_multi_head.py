"""Pictures of lesson 6 (read by course.engine.pictures.load): the learner's multi_head_attention
weights on the engine's example, and the shapes at every step of one call on an example whose
sizes all differ (the calls it makes to the learner's earlier lessons are recorded)."""

from course.engine.testing import (
    maps,
    shapes,
)


def learner(module, e):
    _, weights = module.multi_head_attention(e.x, e.x, e.params, e.heads, e.causal)
    return weights


MAPS = maps.MapPipeline(learner=learner, reference=maps.heads_reference, heads=4)

SIZES = {"B": 7, "T": 3, "S": 5, "H": 4, "K": 6, "D": 24, "G": 2, "GK": 12, "1": 1}


def run(module, ex):
    params = {name: ex.array("D D") for name in ("w_q", "w_k", "w_v", "w_o")}
    x_q, x_kv = ex.array("B T D"), ex.array("B S D")
    return shapes.traced(module, "multi_head_attention", x_q, x_kv, params, ex.size("H"))


SHAPES = shapes.ShapePlan(
    sizes=SIZES,
    points=(
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
    ),
    run=run,
)
