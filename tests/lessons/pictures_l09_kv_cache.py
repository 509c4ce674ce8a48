"""Pictures of lesson 9 (read by course.engine.pictures.load): the sentence decoded token by token
with the learner's decode_step, each new query's weights read off the key cache it returned
(four query heads over two key/value heads), and the shapes at every step of one decode step on
an example whose sizes all differ."""

import numpy as np

from course.engine.testing import (
    LearnerError,
    maps,
    shapes,
)


def decoded_weights(e, step):
    """Decode the sentence with ``step`` (the learner's decode_step or the reference) and read
    each new query's weights off the key cache it returned."""
    x, p, h, g = e.x, e.params, e.heads, e.kv_heads
    k_width = x.shape[-1] // h
    cache_k = cache_v = np.zeros((1, g, 0, k_width))
    weights = np.zeros((h, maps.T, maps.T))
    for t in range(maps.T):
        _, cache_k, cache_v = step(x[:, t : t + 1], cache_k, cache_v, p, h, g)
        if not isinstance(cache_k, np.ndarray) or cache_k.shape != (1, g, t + 1, k_width):
            raise LearnerError(
                f"after token {t} the cache_k has shape {getattr(cache_k, 'shape', None)}; "
                f"expected (B, G, S, K) = {(1, g, t + 1, k_width)}."
            )
        q = maps.split(maps.projected(x[:, t : t + 1], p, "q"), h)  # (1, H, 1, K)
        keys = cache_k[:, e.groups()]  # (1, H, t+1, K)
        weights[:, t, : t + 1] = maps.reference_attention(q, keys, np.ones((1, t + 1), bool))[0, :, 0]
    return weights


def reference_step(x_t, cache_k, cache_v, params, h, g):
    k = maps.split(maps.projected(x_t, params, "k"), g)
    v = maps.split(maps.projected(x_t, params, "v"), g)
    return None, np.concatenate([cache_k, k], axis=2), np.concatenate([cache_v, v], axis=2)


MAPS = maps.MapPipeline(
    learner=lambda module, e: decoded_weights(e, module.decode_step),
    reference=lambda e: decoded_weights(e, reference_step),
    heads=4,
    kv_heads=2,
)

SIZES = {"B": 7, "T": 3, "S": 5, "H": 4, "K": 6, "D": 24, "G": 2, "GK": 12, "1": 1}


def run(module, ex):
    b, s, g, k = (ex.size(letter) for letter in "BSGK")
    params = {
        "w_q": ex.array("D D"),
        "w_k": ex.array("D GK"),
        "w_v": ex.array("D GK"),
        "w_o": ex.array("D D"),
    }
    cache = ex.rng.standard_normal((b, g, s - 1, k))  # S - 1 cached tokens, then the new one
    x_t = ex.array("B 1 D")
    return shapes.traced(module, "decode_step", x_t, cache, cache.copy(), params, ex.size("H"), g)


SHAPES = shapes.ShapePlan(
    sizes=SIZES,
    points=(
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
    ),
    run=run,
)
