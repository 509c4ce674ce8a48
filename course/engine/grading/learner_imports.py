"""What a learner's lesson file imports: their own helper modules, and modules from elsewhere.

A lesson file may import the learner's own modules from their folder (``from utils import
norm``): `course submit` bundles them and `course grade` extracts them beside the lesson files,
so they are found here, transitively, by reading syntax trees (``ast``): the learner's code is
never run to find them. A helper is only a ``NAME.py`` file at the top of the folder.

A helper cannot be named like a module the grader finds first or runs by itself
(``not_a_helper``): the worker puts the learner's folder last on ``sys.path``, so a ``random.py``
or ``scipy.py`` is never the one imported, and a ``conftest.py`` or ``sitecustomize.py`` would
configure pytest or Python. Whatever else a lesson file imports at its top (``outside``) must be
numpy or the standard library (or the course itself, whose tiny model lessons use): a
classroom's grader has nothing else.
"""

from __future__ import annotations

import ast
import functools
import importlib.machinery
import os
import sys
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

ALLOWED_OUTSIDE = frozenset({"numpy", "course"})  # course: lessons read ``course.tiny_model``
HOOKS = frozenset({"conftest", "sitecustomize", "usercustomize", "__main__", "__init__"})
FILE_LIMIT = 2**20  # a helper larger than this is never read (a bundle's member is at most this)

Lookup = Callable[[str], bytes | None]


def imported(source: bytes, top_level: bool = False) -> list[str]:
    """The top-level names of the modules ``source`` imports by absolute import, once each, in
    order: from every import statement, or with ``top_level`` from those directly in the
    module's body (not those under ``try``, ``if`` or a function). Empty when it does not parse."""
    try:
        tree = ast.parse(source)
        nodes = tree.body if top_level else list(ast.walk(tree))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    names: list[str] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found = [node.module]
        else:
            continue
        for name in found:
            first = name.split(".")[0]
            if first not in names:
                names.append(first)
    return names


def reach(roots: Iterable[bytes], lookup: Lookup, lessons: Collection[str]) -> dict[str, bytes]:
    """The modules (name -> source) that ``roots`` import, directly or through one another,
    and that ``lookup`` finds; lesson modules are never followed (they are lesson files)."""
    found: dict[str, bytes] = {}
    waiting = list(roots)
    while waiting:
        for name in imported(waiting.pop()):
            if name in found or name in lessons:
                continue
            source = lookup(name)
            if source is not None:
                found[name] = source
                waiting.append(source)
    return found


def folder_lookup(folder: Path) -> Lookup:
    """Finds ``NAME.py`` at the top of ``folder`` (a file of at most ``FILE_LIMIT`` bytes)."""

    def lookup(name: str) -> bytes | None:
        path = folder / f"{name}.py"
        try:
            if not path.is_file() or path.stat().st_size > FILE_LIMIT:
                return None
            return path.read_bytes()
        except OSError:
            return None

    return lookup


def outside(sources: Iterable[bytes], own: Collection[str], lessons: Collection[str]) -> list[str]:
    """What ``sources`` import at their top that is neither the learner's (``own``, ``lessons``)
    nor numpy, the course or the standard library: a classroom's grader does not have it."""
    names: list[str] = []
    for source in sources:
        for name in imported(source, top_level=True):
            if name in names or name in own or name in lessons or name in ALLOWED_OUTSIDE:
                continue
            if name not in sys.stdlib_module_names:
                names.append(name)
    return names


def not_a_helper(name: str, lessons: Collection[str], folder: Path | None = None) -> str:
    """Why the learner's module ``name`` cannot be a helper, as the end of a sentence ("it is
    ..."), or "" when it can. ``folder``: the learner's, never searched for installed ones."""
    if name in lessons:
        return f"named like the lesson module {name}"
    if name in HOOKS:
        return "a file pytest or Python runs by itself (conftest, sitecustomize, usercustomize ...)"
    if name in sys.stdlib_module_names:
        return f"named like the standard library's {name}, which Python imports instead"
    where = installed(name, folder)
    if where:
        return f"named like the installed {name} ({where}), which Python imports instead"
    return ""


def installed(name: str, folder: Path | None = None) -> str:
    """Where a module ``name`` is installed (outside ``folder``), or "": found on ``sys.path``
    by the path finder (nothing imported or run), or named by an installed distribution."""
    skipped = os.path.realpath(folder) if folder is not None else None
    path = [entry for entry in sys.path if entry and os.path.realpath(entry) != skipped]
    try:
        spec = importlib.machinery.PathFinder.find_spec(name, path)
    except (ImportError, OSError, ValueError):
        spec = None
    if spec is not None and spec.loader is not None:  # a namespace portion shadows nothing
        return spec.origin or name
    distributions = _distributions().get(name)
    return f"from {', '.join(distributions)}" if distributions else ""


@functools.cache
def _distributions() -> dict[str, list[str]]:
    """Top-level module name -> the installed distributions that provide it."""
    from importlib import metadata

    try:
        return dict(metadata.packages_distributions())
    except Exception:  # a broken distribution's metadata: the path finder still looked
        return {}


def own_names(folder: Path) -> set[str]:
    """The names a lesson file in ``folder`` imports from there: ``NAME.py`` files and folders."""
    try:
        entries = os.listdir(folder)
    except OSError:
        return set()
    names = {entry[:-3] for entry in entries if entry.endswith(".py")}
    names |= {entry for entry in entries if (folder / entry).is_dir()}
    return names


def outside_notice(lesson_file: Path, lessons: Collection[str]) -> str:
    """One sentence naming what ``lesson_file`` (and the helpers it imports from its folder)
    imports at the top from neither its folder, numpy nor the standard library: a warning,
    since `course submit` refuses it and a classroom's grader does not have it."""
    folder = lesson_file.parent
    source = folder_lookup(folder)(lesson_file.stem)
    if source is None:
        return ""
    helpers = reach([source], folder_lookup(folder), lessons)
    names = outside([source, *helpers.values()], own_names(folder), lessons)
    if not names:
        return ""
    listed = ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")
    return (
        f"{lesson_file.name} imports {listed}, neither numpy nor the standard library: "
        "`course submit` refuses it, and a class is graded without it."
    )
