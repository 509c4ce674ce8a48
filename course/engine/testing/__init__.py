"""The one face grading tests and lesson pictures modules import (``tests/lessons/``).

Everything a grading test needs, from wherever in the engine it lives: the exercise markers, the
array checks with their feedback and classic mistakes (``compare``, ``mistakes``), the shared
hypothesis profile (``profile``), remembered oracles (``memo``), the errors a learner's call
raises on the grader's side (``engine.calls``), and the picture kinds a lesson may ask for
(``engine.pictures``). Grading tests import nothing else of the engine, so the engine's layout
can change without touching a hashed grading file.
"""

from course.engine.calls.errors import DependencyNotReady, LearnerError, LearnerProblem, NotStarted
from course.engine.calls.learner_module import LearnerModule
from course.engine.pictures import maps, shapes
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
    exercise,
    hand_checked,
    named_by_code,
    settings,
    tolerances,
)
from course.engine.testing.memo import remembered

__all__ = [
    "GRADING_SEED",
    "DependencyNotReady",
    "HeadGrid",
    "KnownMistake",
    "LearnerError",
    "LearnerModule",
    "LearnerProblem",
    "LineChart",
    "Mistake",
    "NotStarted",
    "NumberTable",
    "check_array",
    "check_not_modified",
    "check_peak_below",
    "check_scalar",
    "check_tuple",
    "diagnose",
    "exercise",
    "hand_checked",
    "maps",
    "named_by_code",
    "remembered",
    "settings",
    "shapes",
    "tolerances",
]
