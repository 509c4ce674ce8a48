"""Pictures of lesson 3 (read by course.engine.pictures.load): the learner's attention weights from
scaled_dot_product_attention on the engine's example, beside trusted ones."""

from course.engine.testing import (
    maps,
)


def learner(module, e):
    _, weights = module.scaled_dot_product_attention(e.q, e.k, e.v, e.causal)
    return weights


def reference(e):
    return maps.reference_attention(e.q, e.k, e.causal)


MAPS = maps.MapPipeline(learner=learner, reference=reference)
