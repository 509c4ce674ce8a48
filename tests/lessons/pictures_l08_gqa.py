"""Pictures of lesson 8 (read by course.engine.pictures.load): the learner's grouped_query_attention
weights with four query heads over two key/value heads (and which one each reads), and the
shapes at every step of one call on an example whose sizes all differ."""

from course.engine.testing import (
    maps,
    shapes,
)


def learner(module, e):
    _, weights = module.grouped_query_attention(e.x, e.x, e.params, e.heads, e.kv_heads, e.causal)
    return weights


MAPS = maps.MapPipeline(learner=learner, reference=maps.heads_reference, heads=4, kv_heads=2)

SIZES = {"B": 7, "T": 3, "S": 5, "H": 4, "K": 6, "D": 24, "G": 2, "GK": 12, "1": 1}


def run(module, ex):
    params = {
        "w_q": ex.array("D D"),
        "w_k": ex.array("D GK"),
        "w_v": ex.array("D GK"),
        "w_o": ex.array("D D"),
    }
    x_q, x_kv = ex.array("B T D"), ex.array("B S D")
    return shapes.traced(module, "grouped_query_attention", x_q, x_kv, params, ex.size("H"), ex.size("G"))


SHAPES = shapes.ShapePlan(
    sizes=SIZES,
    points=(
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
    ),
    run=run,
)
