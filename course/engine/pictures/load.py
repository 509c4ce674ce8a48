"""A lesson's pictures module: what the lesson wants drawn, read from its grading folder.

Everything lesson-specific about pictures lives beside the lesson's grading tests, in
``pictures_<module>.py`` (``Lesson.pictures``; the name does not match pytest's ``test_*.py``, so
the grader never collects it). The module is plain trusted Python that may define:

- ``MAPS``: a ``maps.MapPipeline`` (the attention maps of ``course show --map``);
- ``SHAPES``: a ``shapes.ShapePlan`` (the shape trace under a failed check);
- ``figures(module)``: further pictures (``figures.figures``) for ``course show --map``;
- ``EXPERIMENTS``: a tuple of ``experiments.Experiment``, long measurements ``course experiment``
  runs on the learner's code.

No file means no pictures. The file is read through ``integrity.trusted`` like the grading tests,
so an edited pictures module is replaced by its pristine copy. It runs in the trusted process and
reaches learner code only through ``learner_module.LearnerModule``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TypeVar

from course.content.catalog import Lesson
from course.engine import integrity

Part = TypeVar("Part")
_LOADED: dict[tuple[str, str], ModuleType] = {}


def load(lesson: Lesson) -> ModuleType | None:
    """The lesson's pictures module (the pristine copy when the grading folder was modified),
    or None when the lesson has none."""
    trusted = integrity.trusted(lesson.pictures)
    try:
        path = trusted.test_file
        if not path.is_file():
            return None
        source = path.read_bytes()
        key = (lesson.module, hashlib.sha256(source).hexdigest())
        if key not in _LOADED:
            _LOADED[key] = _execute(f"course_pictures_{lesson.module}", path, source)
        return _LOADED[key]
    finally:
        trusted.cleanup()


def _execute(name: str, path: Path, source: bytes) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses defined in the module look themselves up here
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def part(lesson: Lesson, name: str, kind: type[Part]) -> Part | None:
    """``name`` from the lesson's pictures module when it is a ``kind``, else None."""
    module = load(lesson)
    value = getattr(module, name, None) if module is not None else None
    return value if isinstance(value, kind) else None
