"""Experiments: long measurements a learner runs on their own code (``course experiment``).

A lesson's pictures module (see ``load``) may define ``EXPERIMENTS``, a tuple of ``Experiment``
(anything else in it is ignored). An experiment's ``run(module, progress)`` calls the learner's
functions through ``module``, a ``LearnerModule`` under ``Limits.for_experiments`` (one call may
take ``EXPERIMENT_CALL_SECONDS``, the whole run ``EXPERIMENT_RUN_SECONDS``, and the worker keeps
freed memory for reuse), as often as it likes, e.g. ``train`` 50 steps at a time, each call
resuming from the state the previous one returned. It returns figures (``figures``), computed
here in the trusted process from the arrays the learner's functions returned.

Progress: ``run`` reports how far it is by calling ``progress(done, total, status)``: ``done``
and ``total`` in the experiment's own unit (steps, calls), ``done`` growing up to ``total``
(``total`` may change if the experiment learns it later), ``status`` one short line ("step
150 of 600, loss 2.31") or "". Report once before the first long call, so the bar appears.

Stopping: whoever gave ``progress`` stops the experiment by raising from it, and Ctrl-C raises
KeyboardInterrupt wherever the run is (waiting for the worker, or in ``progress``). ``run`` here
closes the learner's module either way (its workers and everything they started are killed) and
lets the exception through, so an experiment's ``run`` must not catch more than the learner
problems it expects (never a bare ``except:`` or ``BaseException``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from course.content.catalog import Lesson
from course.engine.calls import errors, learner_module
from course.engine.pictures import load
from course.engine.pictures.figures import Figure, HeadGrid, LineChart, NumberTable
from course.engine.sandbox.limits import Limits


class Progress(Protocol):
    """What an experiment calls to say how far it is (see the module's docstring)."""

    def __call__(self, done: float, total: float, status: str = "") -> None: ...


@dataclass(frozen=True)
class Experiment:
    """One long measurement of a lesson: ``name`` is what the learner types (``course
    experiment 15 NAME``), ``title`` heads its screen, ``about`` is one short paragraph for the
    learner (what it measures, how long it takes); ``run(module, progress)`` returns figures."""

    name: str
    title: str
    about: str
    run: Callable[[learner_module.LearnerModule, Progress], list[Figure]]


def experiments(lesson: Lesson) -> tuple[Experiment, ...]:
    """The lesson's experiments (its pictures module's ``EXPERIMENTS``), in its order; none when
    it has no pictures module or no such tuple."""
    found = load.part(lesson, "EXPERIMENTS", tuple) or ()
    return tuple(each for each in found if isinstance(each, Experiment))


def find(lesson: Lesson, name: str) -> Experiment:
    """The lesson's experiment called ``name``; LookupError, naming the valid ones, if none is."""
    found = experiments(lesson)
    for each in found:
        if each.name == name:
            return each
    if not found:
        raise LookupError(f"Lesson {lesson.id} has no experiments.")
    names = ", ".join(each.name for each in found)
    raise LookupError(f"Lesson {lesson.id} has no experiment named {name!r}: its experiments are {names}.")


def run(lesson: Lesson, source_dir: Path, name: str, progress: Progress) -> tuple[list[Figure], str]:
    """Run the lesson's experiment ``name`` (LookupError if there is none) on the learner's
    file in ``source_dir``: its figures, and a one-line problem when the learner's code could
    not make them. Whatever ``progress`` raises (and KeyboardInterrupt) goes through, after the
    learner's workers were stopped."""
    experiment = find(lesson, name)
    learner = learner_module.LearnerModule(source_dir, lesson.module, limits=Limits.for_experiments())
    try:
        made = experiment.run(learner, progress)
    except errors.NotStarted:
        return [], "Your function still raises NotImplementedError: nothing to run yet."
    except errors.LearnerProblem as problem:
        return [], str(problem)
    except (TypeError, ValueError):
        return [], "Your function did not return what the experiment needs."
    finally:
        learner.close()
    return [f for f in made if isinstance(f, (HeadGrid, LineChart, NumberTable))], ""
