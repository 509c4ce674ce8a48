"""The typer app of the `course` command, assembled from the command modules.

``learner`` (init, next, check, list, show, hint, reset, solution), ``experiments``
(experiment), ``reference`` (glossary, faq), ``bench``, ``watch``, ``notebooks``, ``instructor``
(submit, grade, classroom), ``gradebook`` (merge shards, run them on an engine) and ``dev``
(maintainers) each add their commands with ``register(app)``. Importing this imports typer and
every command module: ``course.cli.main`` does so only for what ``course.cli.quick`` leaves to it.
"""

from __future__ import annotations

from typing import Annotated

import typer

from course.cli import (
    bench,
    dev,
    experiments,
    gradebook,
    instructor,
    learner,
    notebooks,
    quick,
    reference,
    watch,
)
from course.cli.options import new_app

app = new_app(
    "course",
    "Implement multi-head attention from scratch in numpy, one lesson at a time.\n\n"
    "Start with `course next`: it creates your workspace and tells you what to do.",
)


def _print_version(given: bool) -> None:
    if given:
        quick.print_version()
        raise typer.Exit()


@app.callback()
def _course(
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print the version and exit."),
    ] = False,
) -> None:
    """The options of `course` itself (its help is the app's)."""


for _module in (learner, experiments, reference, bench, watch, dev, notebooks, instructor, gradebook):
    _module.register(app)
