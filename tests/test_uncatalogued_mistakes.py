"""Mistakes nobody catalogued fail, and are never named after another mistake.

tests/uncatalogued/<lesson>.toml holds realistic mistakes written blind, from the lesson files
alone, without reading tests/mistakes/ or the grading tests: the same format as tests/mistakes/
(edits of the solution), with the exercise the edit is in, what the learner misunderstood and an
input on which the mistake is wrong. ``may_name`` lists the catalogued mistakes that are in truth
the same misunderstanding (a blind writer can hit one): only those may be named. One marked
``harmless`` (with why) equals the reference on every graded input: it must pass, so that it is
looked at again the day the grader can tell it apart. The held-back cases of a review are of this
kind, so the grader's names must rest on evidence, not on these.

`python tools/uncatalogued_feedback.py` prints how each one reads (named right, inferable,
generic, wrong, false pass).
"""

from __future__ import annotations

import pytest

from tests.helpers import (
    UNCATALOGUED,
    classic_mistakes,
    grade_folder,
    mistaken_source,
    named_ids,
    solutions_with,
)

CASES = classic_mistakes(UNCATALOGUED)


def test_the_blind_set_has_enough_mistakes_for_every_lesson():
    counts: dict[str, int] = {}
    for module, _ in CASES:
        counts[module] = counts.get(module, 0) + 1
    for number in range(1, 15):
        module = next((m for m in counts if m.startswith(f"l{number:02d}_")), None)
        assert module is not None, f"lesson {number} has no uncatalogued mistakes"
        assert counts[module] >= (8 if number >= 10 else 3), (module, counts[module])


@pytest.mark.parametrize("module, mistake", CASES, ids=[f"{m}/{x['name']}" for m, x in CASES])
def test_an_uncatalogued_mistake_fails_and_is_named_after_no_other(module, mistake, tmp_path):
    result = grade_folder(solutions_with(tmp_path, module, mistaken_source(module, mistake)), module)
    if "harmless" in mistake:
        assert result["status"] == "passed", f"{module}/{mistake['name']} is marked harmless but fails"
        return
    assert result["status"] != "passed", f"{module}/{mistake['name']} passed: {mistake['differs_on']}"
    allowed = set(mistake.get("may_name", []))
    for ids in named_ids(result):
        assert ids & allowed, f"{module}/{mistake['name']} was named {sorted(ids)} ({mistake['why']})"
