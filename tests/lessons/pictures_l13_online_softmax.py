"""Pictures of lesson 13 (read by course.engine.pictures.load): the peak memory of the learner's
online_softmax_attention beside that of their lesson 3 scaled_dot_product_attention (which the
lesson file imports), both measured by the grader from outside the process that runs them
(`module.measure`), at T = 256 queries and a growing number of keys S.

No attention maps: the online function returns no weights (tests/test_maps.py lists the lessons
that draw maps)."""

import numpy as np

from course.engine.testing import (
    LearnerProblem,
    LineChart,
    NumberTable,
)

T, D = 256, 4  # queries, head width (= value width)
KEYS = (1_024, 2_048, 4_096, 8_192, 16_384)  # S: the (T, S) float64 scores are 2 to 32 MiB
MIB = 1024**2


def _peak(module, name, q, k, v):
    """The peak memory of one call of the learner's ``name``, in MiB, read by the grader."""
    measured = module.measure(name, q, k, v)
    return measured.peak_bytes / MIB


def figures(module):
    """Peak memory against S: flat for the online version, growing like T * S for lesson 3.

    Every online call is measured before any call of lesson 3: memory a process has freed is
    not always given back to the system, so a large call measured first would inflate the
    figures of the calls after it in the same measuring process."""
    r = np.random.default_rng(0)
    q = r.standard_normal((T, D))
    inputs = [(r.standard_normal((n_s, D)), r.standard_normal((n_s, D))) for n_s in KEYS]
    try:
        yours = [_peak(module, "online_softmax_attention", q, k, v) for k, v in inputs]
    except RuntimeError as problem:  # no Landlock: nothing can be measured honestly here
        return [NumberTable("peak memory (not measured)", ("why",), ((str(problem),),))]
    try:
        lesson3 = [_peak(module, "scaled_dot_product_attention", q, k, v) for k, v in inputs]
    except LearnerProblem:
        lesson3 = [float("nan")] * len(KEYS)
    table = [
        (n_s, T * n_s * 8 / MIB, (q.nbytes + k.nbytes + v.nbytes) / MIB, mine, theirs)
        for n_s, (k, v), mine, theirs in zip(KEYS, inputs, yours, lesson3, strict=True)
    ]
    figures = [
        NumberTable(
            f"peak memory in MiB at T = {T}, measured from outside (NaN: lesson 3 not finished)",
            ("S keys", "(T, S) scores", "q, k, v", "online (yours)", "lesson 3 (yours)"),
            tuple(table),
            ("d", ".1f", ".1f", ".1f", ".1f"),
        )
    ]
    series = {"online_softmax_attention": tuple(yours)}
    if not np.isnan(lesson3).any():
        series["scaled_dot_product_attention (lesson 3)"] = tuple(lesson3)
    figures.append(
        LineChart(
            f"peak memory (MiB) against the number of keys S, T = {T} (the calls of the table above)",
            tuple(float(n_s) for n_s in KEYS),
            series,
            x_label="S keys",
            y_label="MiB",
        )
    )
    return figures
