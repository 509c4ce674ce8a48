"""The course's glossary and FAQ: the shipped data passes dev check, dev check catches a wrong
number, an unknown lesson and an expression it must not evaluate, and the commands show it."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from course.cli import app
from course.content.catalog import load_catalog
from course.content.glossary import GLOSSARY_FILE, UnknownTerm, load_glossary
from course.devcheck.glossary import glossary_problems, parse_call
from tests.helpers import REPO

ENV = {"NO_COLOR": "1", "COLUMNS": "100"}
REQUIRED = [
    "attention mechanism",
    "self-attention",
    "cross-attention",
    "scaled dot-product attention",
    "softmax",
    "query, key, value",
    "head",
    "multi-head attention",
    "causal mask",
    "padding mask",
    "GQA",
    "MQA",
    "KV cache",
    "transformer architecture",
    "LLM",
    "head pruning",
    "FlashAttention",
    "backpropagation",
    "cross-entropy",
    "AdamW",
    "bias correction",
    "weight decay",
    "learning-rate schedule",
    "uptraining",
]


def problems_after(tmp_path, *edits: tuple[str, str]) -> set[tuple[str, str]]:
    """Dev check's glossary problems once each ``old`` (found once) is replaced by its ``new``."""
    text = GLOSSARY_FILE.read_text(encoding="utf-8")
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    edited = tmp_path / "glossary.toml"
    edited.write_text(text, encoding="utf-8")
    return {(p.id, p.message) for p in glossary_problems(REPO, load_catalog(), edited)}


def test_the_shipped_glossary_passes_dev_check_and_names_every_required_term():
    assert glossary_problems(REPO, load_catalog()) == []
    glossary = load_glossary()
    for name in REQUIRED:
        glossary.find(name)  # by name or alias: raises UnknownTerm otherwise
    assert len(glossary.faq) >= 4 and all(answer.sources for answer in glossary.faq)


def test_dev_check_evaluates_the_expression_and_catches_a_wrong_number(tmp_path):
    found = problems_after(
        tmp_path,
        ("instead of 268,435,456", "instead of 268,435,457"),  # the text and the data agree,
        ("value = 268435456,", "value = 268435457,"),  # but the computation does not
    )
    assert found == {
        (
            "glossary-number",
            "The term 'grouped-query attention' cites 268,435,457, but "
            "count_parameters(8192, 64, None, False) is 268435456 with the reference solution.",
        )
    }


def test_dev_check_catches_a_lesson_the_catalog_does_not_list(tmp_path):
    found = problems_after(
        tmp_path,
        ('{ lesson = "13", function = "online_softmax" }', '{ lesson = "31", function = "online_softmax" }'),
    )
    assert (
        "glossary-lesson",
        "The term 'online softmax' names lesson '31', which the catalog does not list.",
    ) in found


def test_dev_check_catches_a_large_number_cited_without_its_computation(tmp_path):
    found = problems_after(tmp_path, ("1,342,177,280 bytes for", "1,342,177,281 bytes for"))
    assert any(id == "glossary-number-text" and "1,342,177,281 without" in message for id, message in found)


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('touch pwned')",
        "count_parameters(512, 8) + 1",
        "count_parameters(*[512, 8])",
        "count_parameters(512, len('abcdefgh'))",
        "sorted(512, 8)",
    ],
)
def test_dev_check_never_evaluates_an_expression_that_is_not_one_named_call_of_literals(
    tmp_path, monkeypatch, expression
):
    monkeypatch.chdir(tmp_path)
    found = problems_after(
        tmp_path, ('expression = "count_parameters(1024, 16)"', f'expression = "{expression}"')
    )
    assert any(id == "glossary-expression" for id, _ in found), found
    assert not (tmp_path / "pwned").exists()


def test_an_expression_is_a_call_of_a_name_with_literal_arguments_only():
    assert parse_call("kv_cache_bytes(1, 1, 96, 96, 128, bytes_per_value=2)") == (
        "kv_cache_bytes",
        [1, 1, 96, 96, 128],
        {"bytes_per_value": 2},
    )
    for refused in ("np.sum([1])", "f()()", "x", "f(**{'a': 1})", "f(g(1))", "f(1"):
        with pytest.raises(ValueError):
            parse_call(refused)


def test_dev_check_leaves_the_lesson_modules_this_process_had_imported():
    sentinel = type(sys)("l07_why_heads")
    sys.modules["l07_why_heads"] = sentinel
    try:
        assert glossary_problems(REPO, load_catalog()) == []
        assert sys.modules["l07_why_heads"] is sentinel
    finally:
        del sys.modules["l07_why_heads"]


def test_a_term_is_found_by_any_case_or_alias_and_a_typo_gets_a_suggestion():
    glossary = load_glossary()
    assert glossary.find("gqa") is glossary.find("Grouped-Query  Attention")
    with pytest.raises(UnknownTerm) as raised:
        glossary.find("multihed attention")
    assert "multi-head attention" in raised.value.suggestions
    assert "multi-head attention" in [term.name for term in glossary.terms_of("06")]


def test_course_glossary_lists_the_terms_and_shows_one_with_its_numbers_and_sources():
    listing = CliRunner().invoke(app, ["glossary"], env=ENV)
    assert listing.exit_code == 0
    assert all(term.name in listing.output for term in load_glossary().terms)
    shown = CliRunner().invoke(app, ["glossary", "gqa"], env=ENV)
    flat = " ".join(shown.output.split())
    assert shown.exit_code == 0 and "grouped-query attention" in flat
    assert "117,440,512 = kv_parameter_saving(8192, 64, 8, False) (lesson 08)" in flat
    assert "lesson 08 (Grouped-query attention): grouped_query_attention" in flat
    assert "arXiv:2305.13245" in flat
    typo = CliRunner().invoke(app, ["glossary", "multihed attention"], env=ENV)
    assert typo.exit_code == 2 and "Did you mean 'multi-head attention'" in " ".join(typo.output.split())


def test_course_faq_answers_with_numbers_and_the_lessons_that_compute_them():
    done = CliRunner().invoke(app, ["faq"], env=ENV)
    flat = " ".join(done.output.split())
    assert done.exit_code == 0
    for question in ("How many heads are typical?", "Why not one wider head?", "What is GQA?"):
        assert question in flat
    assert "1,050,624 = count_parameters(512, 1) (lesson 07)" in flat
    assert "604,028,928 = count_parameters(12288, 96) (lesson 07)" in flat
