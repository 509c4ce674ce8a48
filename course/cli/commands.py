"""The typer app of the `course` command, assembled from the command modules.

``learner`` (init, next, check, list, show, hint, reset, solution), ``reference`` (glossary,
faq), ``bench``, ``watch``, ``notebooks``, ``instructor`` (submit, grade, classroom) and ``dev``
(maintainers) each add their commands with ``register(app)``. Importing this imports typer and
every command module: ``course.cli.main`` does so only for what ``course.cli.quick`` leaves to it.
"""

from __future__ import annotations

from course.cli import bench, dev, instructor, learner, notebooks, reference, watch
from course.cli.options import new_app

app = new_app(
    "course",
    "Implement multi-head attention from scratch in numpy, one lesson at a time.\n\n"
    "Start with `course next`: it creates your workspace and tells you what to do.",
)
for _module in (learner, reference, bench, watch, dev, notebooks, instructor):
    _module.register(app)
