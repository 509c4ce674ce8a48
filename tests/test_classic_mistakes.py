"""Every classic mistake in tests/mistakes/ fails its lesson, with a message that names it.

tests/mistakes/<lesson>.toml lists a lesson's classic mistakes as data: each is a name, the
words the failure messages must contain (`expect`, case-insensitive), and the edits that turn
the lesson's solution into the mistaken version (each `old` occurs exactly once).
"""

from __future__ import annotations

import pytest

from course.catalog import load_catalog
from tests.helpers import (
    all_messages,
    classic_mistakes,
    grade_folder,
    mistaken_source,
    solutions_with,
)

CASES = classic_mistakes()


def test_every_available_lesson_has_classic_mistakes():
    lessons = {module for module, _ in CASES}
    assert {lesson.module for lesson in load_catalog().available()} <= lessons


def test_mistake_names_are_unique_within_a_lesson():
    names = [(module, mistake["name"]) for module, mistake in CASES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    "module, mistake", CASES, ids=[f"{module}/{mistake['name']}" for module, mistake in CASES]
)
def test_classic_mistake_fails_with_a_message_that_names_it(module, mistake, tmp_path):
    folder = solutions_with(tmp_path, module, mistaken_source(module, mistake))
    result = grade_folder(folder, module)
    assert result["status"] != "passed", f"{mistake['name']} passed lesson {module}"
    messages = " ".join(all_messages(result).split())
    assert mistake["expect"].lower() in messages.lower(), (
        f"no failure message of {module} mentions {mistake['expect']!r}:\n{messages[:3000]}"
    )
