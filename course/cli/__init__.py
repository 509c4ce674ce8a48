"""The `course` command: one typer app assembled from the command modules.

``learner`` (init, next, check, list, show, hint, reset, solution), ``reference`` (glossary,
faq), ``bench``, ``watch``, ``notebooks``,
``instructor`` (submit, grade, classroom) and ``dev`` (maintainers) each add their commands with
``register(app)``; ``common`` holds what they share. Commands call ``progress`` and the
instructor services, and print what ``course.render`` builds.
"""

from __future__ import annotations

import os
import sys

from course.cli import bench, dev, instructor, learner, notebooks, reference, watch
from course.cli.common import new_app

app = new_app(
    "course",
    "Implement multi-head attention from scratch in numpy, one lesson at a time.\n\n"
    "Start with `course next`: it creates your workspace and tells you what to do.",
)
for _module in (learner, reference, bench, watch, dev, notebooks, instructor):
    _module.register(app)


def main() -> None:
    """Console-script entry point. The current folder (a workspace, possibly with a learner's
    numpy.py in it) never belongs on the grader's import path."""
    here = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", here)]
    app()
