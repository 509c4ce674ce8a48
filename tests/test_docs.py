"""Issue 30, item 1: the documentation's commands run as typed. Every fenced block of the README
and docs/ is labelled, a console block holds only commands, and tools/docs_check.py (its own CI
step) runs them; here, the conventions and the checker itself on small documents."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "tools"))
import docs_check  # noqa: E402 - tools/ is not a package

DOCUMENTS = [*docs_check.DOCUMENTS, "CONTRIBUTING.md"]


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_fenced_block_is_labelled(name):
    found = docs_check.blocks((REPO / name).read_text(encoding="utf-8"))
    unlabelled = [block.line for block in found if not block.label]
    assert not unlabelled, f"{name}: unlabelled fenced blocks at lines {unlabelled} (console, text, json ...)"


@pytest.mark.parametrize("name", DOCUMENTS)
def test_a_console_block_holds_only_commands(name):
    for block in docs_check.blocks((REPO / name).read_text(encoding="utf-8")):
        if block.label != "console":
            continue
        continued = False
        for line in block.lines:
            assert line.startswith("$ ") or continued, (
                f"{name}:{block.line}: {line!r} is not a command: put output in a `text` block after it"
            )
            continued = line.endswith("\\")


def write(tmp_path: Path, text: str) -> str:
    (tmp_path / "doc.md").write_text(text)
    return "doc.md"


def test_the_checker_passes_a_document_whose_commands_print_and_exit_as_shown(tmp_path):
    name = write(
        tmp_path,
        "```console\n$ mkdir made && cd made\n$ echo one two \\\n  three\n$ false  # exit 1\n```\n\n"
        "```text\none two three\n```\n\n```console\n$ pwd\n```\n\n```text\nmade\n```\n",
    )
    assert docs_check.check_document(name, root=tmp_path) == []


@pytest.mark.parametrize(
    "text, words",
    [
        ("```console\n$ false\n```\n", "exited 1, documented 0"),
        ("```console\n$ true  # exit 2\n```\n", "exited 0, documented 2"),
        ("```console\n$ echo one\n```\n\n```text\ntwo\n```\n", "not in the output: 'two'"),
    ],
)
def test_the_checker_reports_an_exit_code_or_a_line_that_differs(tmp_path, text, words):
    problems = docs_check.check_document(write(tmp_path, text), root=tmp_path)
    assert len(problems) == 1 and words in problems[0]


def test_the_checker_skips_only_a_block_marked_with_a_reason_and_ignores_times_and_paths(tmp_path, capsys):
    name = write(
        tmp_path,
        "<!-- docs-check: skip: needs GitHub -->\n```console\n$ false\n```\n\n"
        "```console\n$ echo done\n```\n\n```text\ndone\nGraded 4 in 1.8 s\nkept /tmp/somewhere/else\n```\n",
    )
    assert docs_check.check_document(name, root=tmp_path) == []
    assert "skipped: needs GitHub" in capsys.readouterr().out


SKIPPABLE = ("pushes to GitHub", "needs a Kubernetes cluster")


def test_only_the_readmes_test_command_and_blocks_that_need_github_or_a_cluster_are_skipped():
    """What cannot run inside the check is skipped, saying why: the README's test command (the
    whole suite, which CI runs as typed as its own step), a push to GitHub, a cluster."""
    skipped = [
        (name, block)
        for name in docs_check.DOCUMENTS
        for block in docs_check.blocks((REPO / name).read_text(encoding="utf-8"))
        if block.skip
    ]
    suite = [(name, block) for name, block in skipped if block.skip not in SKIPPABLE]
    assert [name for name, _ in suite] == ["README.md"], [(n, b.skip) for n, b in suite]
    [(command, _)] = docs_check.commands(suite[0][1])
    ci = [line.split("  #")[0].strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert "pytest" in command and command in ci


def test_the_result_json_example_has_the_points_of_adas_bundle_in_the_worked_example():
    """docs/instructors.md shows Ada's result.json before the worked example that makes her
    bundle; the docs check runs the example, so its numbers are the course's: the JSON's must
    be the same."""
    import json
    import re

    from course.content.catalog import load_catalog

    found = docs_check.blocks((REPO / "docs" / "instructors.md").read_text(encoding="utf-8"))
    example = json.loads("\n".join(next(block for block in found if block.label == "json").lines))
    said = " ".join(line for block in found if block.label == "text" for line in block.lines)
    lessons, points, most = re.search(
        r"ada\.zip: (\d+) lesson files for Ada Lovelace, \d+ lessons passed, (\d+) of (\d+) points", said
    ).groups()
    assert (example["total_points"], example["max_points"]) == (int(points), int(most))
    assert int(lessons) == len(load_catalog().available())
