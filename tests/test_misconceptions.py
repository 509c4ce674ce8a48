"""Named misconceptions are tied to classic mistakes by id, never by text.

A grading test declares a mistake as ``Mistake(id, says, misconception=<id>)``; a classic mistake
in tests/mistakes/<lesson>.toml that shows a misconception says so (``misconception = "<id>"``).
Every misconception of the registry is shown by some classic mistake, and every id a grading test
or a classic mistake names exists in the registry. That grading the mistake labels its failing
checks with exactly that id (and the fix idea) is asserted where each mistake is graded once:
tests/test_classic_mistakes.py.
"""

import ast
from pathlib import Path

from course.engine.results import CheckResult, ExerciseResult, LessonResult
from course.engine.testing import misconceptions
from tests.helpers import REPO, classic_mistakes

CASES = classic_mistakes()
TIED = [(module, mistake) for module, mistake in CASES if "misconception" in mistake]

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
GRADING_TESTS = sorted((REPO / "tests" / "lessons").glob("test_*.py"))


def test_the_registry_holds_every_named_misconception_once():
    ids = [m.id for m in REGISTRY]
    assert len(ids) == len(set(ids)) and ISSUE_LIST <= set(ids)
    assert all(m.fix and m.name and "`" not in m.fix for m in REGISTRY)


def test_every_misconception_is_shown_by_a_classic_mistake():
    shown = {mistake["misconception"] for _, mistake in TIED}
    assert {m.id for m in REGISTRY} <= shown, "no classic mistake in tests/mistakes shows these"
    assert shown <= {m.id for m in REGISTRY}, "tests/mistakes names misconceptions the registry lacks"


def _declared_misconceptions(path: Path) -> list[tuple[int, ast.expr]]:
    """(line, value) of every ``misconception=`` given to ``Mistake(...)`` in a grading test."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Mistake"
        ):
            values = [k.value for k in node.keywords if k.arg == "misconception"]
            values += node.args[2:3]
            found += [(node.lineno, value) for value in values]
    return found


def test_every_misconception_a_grading_test_names_is_in_the_registry():
    known = {m.id for m in REGISTRY}
    named = set()
    for path in GRADING_TESTS:
        for line, value in _declared_misconceptions(path):
            where = f"{path.relative_to(REPO)}:{line}"
            assert isinstance(value, ast.Constant) and isinstance(value.value, str), (
                f"{where}: name the misconception with a string literal, so that it can be checked"
            )
            assert value.value in known, f"{where} names the unknown misconception {value.value!r}"
            named.add(value.value)
    for module, mistake in TIED:
        assert mistake["misconception"] in known, f"tests/mistakes/{module}.toml: {mistake['name']}"
    assert {mistake["misconception"] for _, mistake in TIED} <= named, (
        "a classic mistake names a misconception that no grading test declares"
    )


def test_an_unknown_misconception_in_a_grading_test_is_found(tmp_path):
    bad = tmp_path / "test_scratch.py"
    bad.write_text('OOPS = Mistake("oops", "the scale is missing", misconception="missing-scael")\n')
    assert [value.value for _, value in _declared_misconceptions(bad)] == ["missing-scael"]
    assert misconceptions.find("missing-scael") is None


def _result(check: CheckResult) -> LessonResult:
    return LessonResult("l00_scratch", "failed", [ExerciseResult("f", "failed", [check])])


def test_label_looks_the_misconception_up_by_id_and_never_reads_the_sentence():
    by_id = CheckResult("t", "failed", "f(x) is wrong.", mistake="anything at all", misconception="minus-1e9")
    misconceptions.label(_result(by_id))
    entry = misconceptions.find("minus-1e9")
    assert entry is not None and by_id.message.endswith(f"Fix idea: {entry.fix}")
    by_text = CheckResult("t", "failed", "f(x) is wrong.", mistake="the 1/sqrt(K) factor is missing")
    misconceptions.label(_result(by_text))
    assert by_text.misconception == "" and "Misconception" not in by_text.message
    unknown = CheckResult("t", "failed", "f(x) is wrong.", mistake="x", misconception="no-such-id")
    misconceptions.label(_result(unknown))
    assert unknown.misconception == "" and "Misconception" not in unknown.message
