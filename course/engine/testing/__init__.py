"""The one face grading tests and lesson pictures modules import (``tests/lessons/``).

Everything a grading test needs, from wherever in the engine it lives: the exercise markers, the
array checks with their feedback and classic mistakes (``compare``, ``mistakes``), the shared
hypothesis profile (``profile``), remembered oracles (``memo``), the errors a learner's call
raises on the grader's side (``engine.calls``), and the picture kinds a lesson may ask for
(``engine.pictures``). Grading tests import nothing else of the engine, so the engine's layout
can change without touching a hashed grading file.

Each name is imported when it is first asked for: the grader imports modules of this package
(``misconceptions``, ``error_shapes``) before a worker has started, and must not load hypothesis
and the pictures with them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the names below are, for readers, type checkers and the import graph
    from course.engine.calls.errors import DependencyNotReady, LearnerError, LearnerProblem, NotStarted
    from course.engine.calls.learner_module import LearnerModule
    from course.engine.pictures import maps, shapes
    from course.engine.pictures.experiments import Experiment
    from course.engine.pictures.figures import HeadGrid, LineChart, NumberTable
    from course.engine.testing.compare import (
        GRADING_SEED,
        KnownMistake,
        Mistake,
        check_array,
        check_not_modified,
        check_peak_below,
        check_scalar,
        check_tuple,
        diagnose,
        enumerable,
        exercise,
        failure,
        hand_checked,
        named_by_code,
        rule_out,
        settings,
        tolerances,
    )
    from course.engine.testing.memo import remembered
    from course.engine.testing.secret import Variation, rng, variation

_FROM = {
    "course.engine.calls.errors": ("DependencyNotReady", "LearnerError", "LearnerProblem", "NotStarted"),
    "course.engine.calls.learner_module": ("LearnerModule",),
    "course.engine.pictures": ("maps", "shapes"),
    "course.engine.pictures.experiments": ("Experiment",),
    "course.engine.pictures.figures": ("HeadGrid", "LineChart", "NumberTable"),
    "course.engine.testing.compare": (
        "GRADING_SEED",
        "KnownMistake",
        "Mistake",
        "check_array",
        "check_not_modified",
        "check_peak_below",
        "check_scalar",
        "check_tuple",
        "diagnose",
        "enumerable",
        "exercise",
        "failure",
        "hand_checked",
        "named_by_code",
        "rule_out",
        "settings",
        "tolerances",
    ),
    "course.engine.testing.memo": ("remembered",),
    "course.engine.testing.secret": ("Variation", "rng", "variation"),
}
_WHERE = {name: module for module, names in _FROM.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if module == "course.engine.pictures":
        value = importlib.import_module(f"{module}.{name}")
    else:
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
