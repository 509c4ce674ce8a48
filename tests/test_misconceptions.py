"""Each named misconception, fed through the grader as the classic mistake that shows it, is named
on the failing check with its one-line fix idea."""

import pytest

from course.engine import misconceptions
from tests.helpers import classic_mistakes, grade_folder, mistaken_source, solutions_with

CASES = classic_mistakes()

REGISTRY = misconceptions.load()
ISSUE_LIST = {
    "missing-scale",
    "scale-one-over-k",
    "softmax-wrong-axis",
    "mask-polarity",
    "mask-after-softmax",
    "minus-1e9",
    "reshape-without-transpose",
    "interleaved-heads",
    "tiled-kv-heads",
    "top-left-causal",
    "k-only-cache",
}


def test_the_registry_holds_every_named_misconception_once():
    ids = [m.id for m in REGISTRY]
    assert len(ids) == len(set(ids)) and ISSUE_LIST <= set(ids)
    assert all(m.fix and m.matches and "`" not in m.fix for m in REGISTRY)


@pytest.mark.parametrize("entry", REGISTRY, ids=[m.id for m in REGISTRY])
def test_the_example_mistake_is_labelled_with_the_misconception_and_its_fix(entry, tmp_path):
    module, name = entry.example.split("/")
    mistake = next(m for lesson, m in CASES if lesson == module and m["name"] == name)
    folder = solutions_with(tmp_path, module, mistaken_source(module, mistake))
    result = grade_folder(folder, module)
    labelled = [
        check
        for exercise in result["exercises"]
        for check in exercise["checks"]
        if check["misconception"] == entry.id
    ]
    assert result["status"] != "passed" and labelled, f"no check names {entry.id}"
    assert f"Fix idea: {entry.fix}" in labelled[0]["message"]


def test_an_unrelated_mistake_is_not_labelled():
    assert misconceptions.find("the bias b is not added") is None
