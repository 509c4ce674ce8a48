"""How the worker imports lessons, and which modules it reports as the learner's.

A module named like a lesson is only ever compiled from its ``.py`` source in the learner's folder
(``LessonFinder``, first in ``sys.meta_path``, with ``_LessonLoader``); after the import,
``lesson_modules`` names the modules that came from that folder, for the import report. Imported
with ``main``, in the zygote too, before anything of the learner's runs.
"""

from __future__ import annotations

import importlib.machinery
import sys
from pathlib import Path
from typing import Any


# The finder and loader below need no base class (the import system asks only for their
# methods), and importlib.abc would load tempfile and random into every worker, the latter with
# a fork handler that reseeds in every keeper and worker the zygote forks.
class _LessonLoader:
    """Executes a lesson module from its ``.py`` source, compiled here: never from bytecode."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: Any) -> None:
        source = self.path.read_bytes()
        code = compile(source, str(self.path), "exec", dont_inherit=True)  # not our __future__s
        exec(code, module.__dict__)  # noqa: S102 - the learner's lesson file, in the worker


class LessonFinder:
    """First in ``sys.meta_path``: a module named like a lesson (``names``, data from the
    grader) is only ever ``<source_dir>/<name>.py``, never a package, a ``.pyc``, an extension
    module or anything else on the path named like it. No such file: no such module."""

    def __init__(self, source_dir: Path, names: list[str]) -> None:
        self.source_dir = source_dir
        self.names = frozenset(names)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.names:
            return None
        file = self.source_dir / f"{fullname}.py"
        if not file.is_file():  # the same words as Python's own import system
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        loader: Any = _LessonLoader(file)
        spec = importlib.machinery.ModuleSpec(fullname, loader, origin=str(file))
        spec.has_location = True  # sets __file__, which tracebacks and shape traces read
        return spec


def lesson_modules(source_dir: Path) -> list[str]:
    """Names of the modules imported from the learner's folder (the lesson and its imports).

    Only a path with the folder's name in it can be in the folder, so only those become a
    ``Path``, not each of numpy's hundreds of modules."""
    found = []
    folder = source_dir.name
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and (type(path) is not str or folder in path) and Path(path).parent == source_dir:
            found.append(name)
    return sorted(found)
