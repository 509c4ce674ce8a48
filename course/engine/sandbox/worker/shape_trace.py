"""The shape trace recorder: in the worker, the calls a lesson makes to the learner's earlier
lessons, with their argument and result shapes, for the grader's shape pictures (``shapes``).

The call loop (``main``) looks the recorder up among its own module's names, where learner code
can replace it: what it records is data the grader checks (``replies.checked_trace``), never
trusts.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

import numpy as np


def _shapes(value: Any) -> list:
    """The shapes inside a value (an array, or a tuple/list of them), for a shape trace."""
    if isinstance(value, np.ndarray):
        return [list(value.shape)]
    if isinstance(value, (tuple, list)) and len(value) <= 8:
        return [shape for item in value for shape in _shapes(item)]
    return [None]


def record_lesson_calls(module: Any, source_dir: Path, trace: list[dict]) -> list:
    """Wrap the functions ``module`` imported from the learner's other lessons so that each
    call appends its name and its argument and result shapes to ``trace``; returns undo steps."""
    undo = []
    for name, value in list(vars(module).items()):
        origin = sys.modules.get(getattr(value, "__module__", "") or "")
        path = getattr(origin, "__file__", None)
        if not (
            inspect.isfunction(value) and origin is not module and path and Path(path).parent == source_dir
        ):
            continue

        def recorder(*args: Any, _name: str = name, _real: Any = value, **kwargs: Any) -> Any:
            entry: dict = {"function": _name, "args": [s for a in args for s in _shapes(a)]}
            trace.append(entry)
            result = _real(*args, **kwargs)
            entry["result"] = _shapes(result)
            return result

        setattr(module, name, recorder)
        undo.append(lambda _name=name, _real=value: setattr(module, _name, _real))
    return undo
