"""The import report names exactly the modules whose file is in the learner's folder
(``lessons.lesson_modules``), however their ``__file__`` is written."""

import os
import sys
import types
from pathlib import Path

import pytest

from course.engine.sandbox import seccomp
from course.engine.sandbox.worker import main as worker


@pytest.fixture
def modules(tmp_path):
    """Adds fake modules to ``sys.modules`` by name and ``__file__``; removes them after."""
    added = []

    def add(name: str, file: object) -> None:
        module = types.ModuleType(name)
        module.__file__ = file  # type: ignore[assignment]
        sys.modules[name] = module
        added.append(name)

    yield add
    for name in added:
        sys.modules.pop(name, None)


def test_the_report_names_the_folders_modules_however_their_path_is_written(tmp_path, modules):
    folder = (tmp_path / "lessons").resolve()
    modules("fake_lesson", str(folder / "fake_lesson.py"))
    modules("fake_dotted", f"{folder.parent}//lessons/./fake_dotted.py")
    modules("fake_pathlike", folder / "fake_pathlike.py")
    modules("fake_sibling", str(folder.parent / "lessons2" / "fake_sibling.py"))
    modules("fake_nested", str(folder / "deeper" / "fake_nested.py"))
    modules("fake_relative", "lessons/fake_relative.py")

    found = worker.lesson_modules(folder)

    assert [name for name in found if name.startswith("fake_")] == [
        "fake_dotted",
        "fake_lesson",
        "fake_pathlike",
    ]


def test_the_report_of_a_folder_at_the_root_names_its_modules(modules):
    modules("fake_at_root", os.sep + "fake_at_root.py")

    assert "fake_at_root" in worker.lesson_modules(Path(os.sep))


def test_seccomp_programs_made_ahead_by_a_zygote_are_those_a_keeper_would_make():
    kinds = [(False, False), (True, False), (True, True)]  # every worker, measured, sealed
    seccomp.prepare()
    ahead = {kind: seccomp._PROGRAMS[kind] for kind in kinds}
    seccomp._PROGRAMS.clear()

    assert {kind: seccomp._filter_program(*kind) for kind in kinds} == ahead
    assert len(set(ahead.values())) == 3  # a measured worker's forbids starting processes too
