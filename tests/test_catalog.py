"""The catalog is the single source of truth: lessons 1-15 listed, names resolve, files derive."""

import tomllib

import pytest

from course.content.catalog import CATALOG_FILE, CatalogError, UnknownLesson, catalog_from_data, load_catalog

CATALOG = load_catalog()


def test_catalog_lists_lessons_one_to_fifteen_in_order():
    assert [lesson.number for lesson in CATALOG.lessons] == list(range(1, 16))
    assert CATALOG.lessons[2].module == "l03_attention"


def test_every_exercise_has_a_summary_and_at_least_two_tiers_of_hints():
    for lesson in CATALOG.lessons:
        assert lesson.exercises, lesson.module
        for exercise in lesson.exercises:
            assert exercise.summary, exercise.name
            assert len(exercise.hints) >= 2 and all(h.strip() for h in exercise.hints), exercise.name


def test_design_contract_function_names_are_exercises():
    names = {lesson.module: {e.name for e in lesson.exercises} for lesson in CATALOG.lessons}
    assert names["l01_projections"] == {"linear", "head_projections", "fuse_head_weights"}
    assert names["l02_softmax"] == {"softmax", "logsumexp"}
    assert names["l03_attention"] == {"attention_scores", "scaled_dot_product_attention"}
    # wave two: the contract's names (a lesson may add exercises, never rename these)
    assert {"head_confidence", "relative_position_share"} <= names["l10_head_roles"]
    assert {"mean_pool_kv_heads"} <= names["l12_gqa_conversion"]
    assert {"online_softmax_attention"} <= names["l13_online_softmax"]
    assert {"attention_backward", "head_mask_gradient"} <= names["l14_attention_backward"]
    assert {
        "masked_multi_head_attention",
        "model_forward",
        "sequence_losses",
        "ablation_importance",
        "head_importance",
        "pruning_curve",
    } == names["l11_head_pruning"]


@pytest.mark.parametrize("name", ["3", "03", "l03", "l03_attention", "attention", "L03_Attention.py"])
def test_a_lesson_resolves_by_number_module_or_short_name(name):
    assert CATALOG.resolve(name).module == "l03_attention"


def test_an_unknown_lesson_names_what_would_be_accepted():
    with pytest.raises(UnknownLesson, match=r"1-15.*l01_projections.*course list"):
        CATALOG.resolve("42")


def test_available_lessons_have_skeleton_solution_and_grading_tests():
    available = CATALOG.available()
    assert [lesson.module for lesson in available][:1] == ["l01_projections"]
    for lesson in available:
        assert lesson.skeleton.is_file() and lesson.solution.is_file()
        assert lesson.grading_tests.is_file()


def catalog_data() -> dict:
    with open(CATALOG_FILE, "rb") as handle:
        return tomllib.load(handle)


def without(table: dict, key: str) -> dict:
    table.pop(key)
    return table


@pytest.mark.parametrize(
    ("break_it", "words"),
    [
        (lambda d: without(d["lessons"][2], "title"), "lesson l03_attention has no 'title'"),
        (lambda d: without(d["lessons"][3], "module"), "lesson entry 4 has no 'module'"),
        (lambda d: without(d["course"], "version"), "[course] has no 'version'"),
        (lambda d: without(d["lessons"][0]["exercises"][1], "name"), "exercise 2 of lesson l01_projections"),
        (lambda d: d["lessons"][4].update(id="5"), "id '5'"),
        (lambda d: d["lessons"][4].update(id="five"), "id 'five'"),
        (lambda d: d["lessons"][4].update(module="l05 heads"), "module 'l05 heads'"),
        (lambda d: d["lessons"][4].update(module=d["lessons"][1]["module"], id="10"), "l02_softmax) twice"),
        (lambda d: d["lessons"][4].update(id="02"), "lesson 02 (l05_heads) twice"),
        (lambda d: d.update(lessons=[]), "no [[lessons]]"),
    ],
)
def test_a_malformed_catalog_is_refused_in_one_line_that_says_where(break_it, words):
    data = catalog_data()
    break_it(data)
    with pytest.raises(CatalogError) as caught:
        catalog_from_data(data)
    message = str(caught.value)
    assert words in message and "\n" not in message


def test_the_shipped_catalog_is_valid():
    assert catalog_from_data(catalog_data()) == CATALOG


def test_the_catalog_is_read_from_its_json_copy_only_while_the_toml_is_unchanged(tmp_path, monkeypatch):
    """The TOML's data is kept as JSON in __pycache__ with the TOML's digest; a copy with
    another digest, or one that is not ours, is ignored and written afresh."""
    import hashlib
    import json
    import pickle
    import sys

    from course.content import catalog as catalog_module

    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    toml = tmp_path / "catalog.toml"
    toml.write_bytes(catalog_module.CATALOG_FILE.read_bytes())
    copy = tmp_path / "__pycache__" / "catalog.toml.json"
    first = catalog_module._data(toml)
    assert json.loads(copy.read_text())["digest"] == hashlib.sha256(toml.read_bytes()).hexdigest()
    kept = json.loads(copy.read_text())
    kept["data"]["course"]["title"] = "Read from the copy"
    copy.write_text(json.dumps(kept))
    assert catalog_module._data(toml)["course"]["title"] == "Read from the copy"
    toml.write_bytes(toml.read_bytes() + b"\n# edited\n")  # another TOML: the copy is stale
    assert catalog_module._data(toml) == first
    assert json.loads(copy.read_text())["digest"] == hashlib.sha256(toml.read_bytes()).hexdigest()
    for garbage in (b"not json", b"[]", b'{"digest": 1}'):
        copy.write_bytes(garbage)
        assert catalog_module._data(toml) == first
    copy.unlink()
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # as Python writes no bytecode then
    assert catalog_module._data(toml) == first and not copy.exists()
    parsed = catalog_module.catalog_from_data(first)
    assert pickle.loads(pickle.dumps(parsed)) == parsed


def test_catalog_records_are_read_only_values():
    lesson = load_catalog().lessons[0]
    same = lesson._replace()
    assert same == lesson and hash(same) == hash(lesson) and same is not lesson
    assert lesson._replace(title="other") != lesson
    assert "module='l01_projections'" in repr(lesson)
    with pytest.raises(AttributeError):
        lesson.title = "changed"


def test_the_exercises_each_exercise_calls_are_those_its_solution_calls():
    """``calls`` in the catalog is what each solution calls, directly or through a helper of its
    own file that is not an exercise: an exercise of its lesson, or one imported from an earlier
    lesson (``module.name``)."""
    import ast

    from tests.helpers import SOLUTIONS

    exercises = {lesson.module: {e.name for e in lesson.exercises} for lesson in CATALOG.lessons}
    for lesson in CATALOG.lessons:
        tree = ast.parse((SOLUTIONS / f"{lesson.module}.py").read_text())
        imported = {
            alias.asname or alias.name: f"{node.module}.{alias.name}"
            for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.module in exercises
            for alias in node.names
            if alias.name in exercises[node.module]
        }
        functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
        for exercise in lesson.exercises:
            found, seen, todo = set(), set(), [exercise.name]
            while todo:
                for call in ast.walk(functions[todo.pop()]):
                    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
                        continue
                    name = call.func.id
                    if name in seen:
                        continue
                    seen.add(name)
                    if name in exercises[lesson.module] and name != exercise.name:
                        found.add(name)
                    elif name in imported:
                        found.add(imported[name])
                    elif name in functions and name not in exercises[lesson.module]:
                        todo.append(name)
            assert set(exercise.calls) == found, (lesson.module, exercise.name)


def test_an_exercise_may_call_only_its_lessons_other_exercises_and_earlier_ones():
    with open(CATALOG_FILE, "rb") as handle:
        data = tomllib.load(handle)
    data["lessons"][0]["exercises"][0]["calls"] = ["l02_softmax.softmax"]  # a later lesson
    with pytest.raises(CatalogError, match="calls 'l02_softmax.softmax'"):
        catalog_from_data(data)
    data["lessons"][0]["exercises"][0]["calls"] = ["linear"]  # itself
    with pytest.raises(CatalogError, match="calls 'linear'"):
        catalog_from_data(data)
