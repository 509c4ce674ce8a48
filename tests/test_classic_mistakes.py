"""Every classic mistake in tests/mistakes/ fails its lesson, with a message that names it.

A mistake is a whole lesson file: the solution with one classic error in it. Its first line says
what the failure messages must mention: ``# expect: <text>`` (case-insensitive).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import MISTAKES, all_messages, grade_folder, solutions_with

CASES = sorted(MISTAKES.glob("l*/*.py"))


def expectation(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path} must start with '# expect: <text>'"
    return first.removeprefix("# expect: ").strip()


def test_there_are_classic_mistakes_for_every_lesson_with_files():
    lessons_with_mistakes = {p.parent.name for p in CASES}
    assert {"l01_projections"} <= lessons_with_mistakes


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.stem}" for p in CASES])
def test_classic_mistake_fails_with_a_message_that_names_it(path, tmp_path):
    module = path.parent.name
    folder = solutions_with(tmp_path, module, path.read_text())
    result = grade_folder(folder, module)
    assert result["status"] != "passed", f"{path.name} passed lesson {module}"
    messages = all_messages(result)
    assert expectation(path).lower() in messages.lower(), (
        f"no failure message of {module} mentions {expectation(path)!r}:\n{messages[:3000]}")
