"""The hypothesis profile grades run under ("grading"), and the seed every property check draws from.

Registered when this module is imported: ``compare`` imports it, and the grading plugin imports
``compare`` before any test runs.
"""

from __future__ import annotations

from typing import Any

try:  # hypothesis is a dependency, but the engine must not fall over if it is missing
    from hypothesis import HealthCheck, Phase, settings

    settings.register_profile(
        "grading",
        # The same examples on every run, so grades are reproducible: the plugin gives every
        # property test the fixed seed GRADING_SEED (cheaper than derandomize=True, which
        # re-reads each test's source to derive its seed).
        database=None,  # never write .hypothesis/ into anyone's folder
        deadline=None,  # time is limited by the worker's own limits
        max_examples=10,
        # No shrinking: a failing property would otherwise re-call the learner's code hundreds
        # of times to find a smaller example.
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
        print_blob=False,
        suppress_health_check=list(HealthCheck),
    )
except ImportError:  # pragma: no cover
    settings = None  # type: ignore[assignment, misc]


def _examples_from_the_seed_alone() -> None:
    """Hypothesis mixes into what it draws (one draw in twenty) constants read from the source
    of every "local" module loaded in the process: which modules happen to be loaded, and
    whether the course runs from a clone (local) or a wheel (site-packages), would change a
    grade's examples, and reading them slows the first check. The grading examples come from
    the profile and the seed alone: that pool is kept empty (hypothesis has no setting for it;
    without the internals named here nothing changes)."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:  # pragma: no cover - another hypothesis: it reads no constants, or keeps them
        return
    if callable(getattr(providers, "_get_local_constants", None)):
        empty = Constants()
        providers._get_local_constants = lambda: empty
        cache: Any = getattr(getattr(providers, "CONSTANTS_CACHE", None), "cache", None)
        if cache is not None and hasattr(cache, "clear"):
            cache.clear()


if settings is not None:
    _examples_from_the_seed_alone()

GRADING_SEED = 20170612  # the day "Attention Is All You Need" appeared
