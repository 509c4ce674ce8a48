"""Pictures of lesson 4 (read by course.engine.pictures.load): trusted attention under the learner's
causal_mask, beside the same attention under the right mask."""

import numpy as np

from course.engine.testing import (
    LearnerError,
    maps,
)


def learner(module, e):
    mask = module.causal_mask(maps.T)
    if not isinstance(mask, np.ndarray) or mask.shape != (maps.T, maps.T):
        raise LearnerError(f"causal_mask({maps.T}) did not return a ({maps.T}, {maps.T}) array.")
    return maps.reference_attention(e.q, e.k, mask.astype(bool))


def reference(e):
    return maps.reference_attention(e.q, e.k, e.causal)


MAPS = maps.MapPipeline(learner=learner, reference=reference)
