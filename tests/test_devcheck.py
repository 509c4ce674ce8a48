"""`course dev check` passes on this tree and lists what is wrong in a broken copy of it;
`course dev skeletons` generates every skeleton from its solution, the lesson's single source."""

from __future__ import annotations

import ast
import json
import shutil
import tomllib
import zipfile
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from course.cli import dev as cli_dev
from course.content import lesson_source
from course.content.catalog import load_catalog
from course.devcheck import check as devcheck
from course.engine import integrity
from tests.helpers import REPO

# Grading in this process runs the grading plugin, whose session fixture on an instance method
# (course/engine/grading/plugin.py, GradingPlugin.lesson) pytest 9 deprecates; not this file's concern.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestRemovedIn10Warning")


def run_cli(*args: str, command: str = "check"):
    app = typer.Typer()
    cli_dev.register(app)
    return CliRunner().invoke(app, ["dev", command, *args])


def ids(problems: list[devcheck.Problem]) -> set[tuple[str, str]]:
    return {(problem.id, problem.file) for problem in problems}


KEPT = 6  # the copy holds lessons 1-6: every case below needs no more, and grading stays quick


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A copy of the parts of this repository that `course dev check` reads, cut to its first
    KEPT lessons (catalog entries, files and their entries in the grading-test manifest)."""
    root = tmp_path / "repo"
    kept = [lesson.module for lesson in load_catalog().lessons[:KEPT]]
    for name in ("lessons", "solutions", "tests/lessons", "tests/mistakes"):
        (root / name).mkdir(parents=True)
        for source in (REPO / name).iterdir():
            if source.is_file() and any(module in source.name for module in kept):
                shutil.copy(source, root / name / source.name)
    fixtures = REPO / "tests" / "lessons" / "fixtures"
    if fixtures.is_dir():
        shutil.copytree(
            fixtures, root / "tests" / "lessons" / "fixtures", ignore=shutil.ignore_patterns("__pycache__")
        )
    catalog = (REPO / "course" / "content" / "catalog.toml").read_text()
    blocks = catalog.split("\n[[lessons]]\n")
    (root / "course" / "content").mkdir(parents=True)
    (root / "course" / "content" / "catalog.toml").write_text("\n[[lessons]]\n".join(blocks[: KEPT + 1]))
    present = set(integrity.grading_files(root / "tests" / "lessons"))
    manifest = json.loads((REPO / "course" / "content" / "grading_manifest.json").read_text())
    manifest = {name: digest for name, digest in manifest.items() if name in present}
    (root / "course" / "content" / "grading_manifest.json").write_text(json.dumps(manifest, indent=1))
    with zipfile.ZipFile(REPO / "course" / "content" / "grading_pristine.zip") as full:
        with zipfile.ZipFile(root / "course" / "content" / "grading_pristine.zip", "w") as cut:
            for name in manifest:
                cut.writestr(name, full.read(name))
    return root


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} must occur once in {path}"
    path.write_text(text.replace(old, new))


def test_an_untouched_copy_passes_and_the_command_exits_0(repo):
    """The whole repository is checked by CI's last step (`course dev check`) and its solutions
    and skeletons by tests/test_grading_lessons.py; here the command runs on the cut copy."""
    assert devcheck.check(repo, hints=False) == []
    done = run_cli("--root", str(repo), "--no-hints")  # every code hint: tried just below
    assert done.exit_code == 0, done.output
    assert "agree" in done.output and "solutions pass" in done.output


def lesson_of(repo: Path, module: str):
    from course.content.catalog import catalog_from_data

    with open(repo / "course" / "content" / "catalog.toml", "rb") as handle:
        return catalog_from_data(tomllib.load(handle)).by_module(module)


def test_every_code_hint_passes_in_place_of_its_solution_and_a_wrong_one_is_reported(repo):
    from course.devcheck.grading import hint_problems

    tests = repo / "tests" / "lessons" / "test_l05_heads.py"
    lesson = lesson_of(repo, "l05_heads")
    assert {hint.replaces for exercise in lesson.exercises for hint in exercise.code_hints} == {
        "split_heads",
        "merge_heads",
    }
    assert hint_problems(lesson, repo, tests) == []
    merge = lesson.exercises[1]
    wrong = merge.code_hints[0]._replace(code="B, H, T, K = x.shape\nreturn x.reshape(B, T, H * K)\n")
    broken = lesson._replace(exercises=(lesson.exercises[0], merge._replace(code_hints=(wrong,))))
    found = hint_problems(broken, repo, tests)
    assert [problem.id for problem in found] == ["hint-fails"]
    assert "l05_heads.merge_heads's hint 3, in place of merge_heads's solution, fails" in found[0].message


def test_a_last_hint_that_writes_code_without_giving_it_as_data_is_reported(repo):
    from course.devcheck.grading import hint_problems

    lesson = lesson_of(repo, "l05_heads")
    merge = lesson.exercises[1]
    prose = merge._replace(
        code_hints=(), hints=(*merge.hints[:-1], "return np.swapaxes(x, 1, 2).reshape(B, T, H * K)")
    )
    found = hint_problems(lesson._replace(exercises=(prose,)), repo, Path("unused"))
    assert [problem.id for problem in found] == ["code-hint-without-data"]


def test_a_grading_test_without_a_title_is_reported(repo):
    path = repo / "tests" / "lessons" / "test_l05_heads.py"
    tree = ast.parse(path.read_text())
    test = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_"))
    lines = path.read_text().splitlines(keepends=True)
    del lines[test.body[0].lineno - 1]  # its docstring, a line of its own
    path.write_text("".join(lines))
    found = [p for p in devcheck.check(repo, grade=False) if p.id == "untitled-check"]
    assert [(p.file, p.message.split(" ")[0]) for p in found] == [
        ("tests/lessons/test_l05_heads.py", test.name)
    ]


def test_a_removed_solution_is_reported_and_the_command_exits_1(repo):
    (repo / "solutions" / "l03_attention.py").unlink()
    problems = devcheck.check(repo, hints=False)
    # lesson 6 imports lesson 3, so its solution cannot be graded either
    assert ids(problems) == {
        ("missing-file", "solutions/l03_attention.py"),
        ("solution-fails", "solutions/l06_multi_head.py"),
    }
    assert "no solution file" in problems[0].message
    assert all(
        "imports your l03_attention.py, which is not in your workspace" in p.message for p in problems[1:]
    )
    done = run_cli("--root", str(repo), "--no-hints")
    assert done.exit_code == 1
    lines = done.output.splitlines()
    assert lines[0].startswith("missing-file  solutions/l03_attention.py: Lesson 03")
    assert lines[1].startswith("solution-fails  solutions/l06_multi_head.py: Grading the")
    assert lines[-1].startswith("course dev check: 2 problem(s)")
    assert len(lines) == 3


def test_a_removed_grading_test_is_reported_with_the_stale_manifest(repo):
    (repo / "tests" / "lessons" / "test_l04_masks.py").unlink()
    problems = devcheck.check(repo, hints=False)
    assert ids(problems) == {
        ("missing-file", "tests/lessons/test_l04_masks.py"),
        ("manifest-stale", "course/content/grading_manifest.json"),
    }
    stale = next(p for p in problems if p.id == "manifest-stale")
    assert "test_l04_masks.py" in stale.message
    assert "tools/update_grading_manifest.py" in stale.message


def test_an_empty_hint_is_reported(repo):
    edit(
        repo / "course" / "content" / "catalog.toml",
        '"Each head h computes x @ w_heads[h], a (B, T, K) array. '
        'Stack the H results on a new axis 1, in head order."',
        '"  "',
    )
    problems = devcheck.check(repo, grade=False)
    assert ids(problems) == {("missing-hints", "course/content/catalog.toml")}
    assert "l01_projections.head_projections" in problems[0].message
    assert "1 of them empty" in problems[0].message


def test_a_missing_summary_is_reported(repo):
    edit(
        repo / "course" / "content" / "catalog.toml",
        'summary = "softmax(x, axis=-1): stable, all -inf row -> zeros, keeps dtype."',
        'summary = ""',
    )
    problems = devcheck.check(repo, grade=False)
    assert [(p.id, p.message) for p in problems] == [
        ("missing-summary", "l02_softmax.softmax has no summary.")
    ]


def test_a_skeleton_solved_by_accident_is_reported(repo):
    shutil.copy(repo / "solutions" / "l02_softmax.py", repo / "lessons" / "l02_softmax.py")
    problems = devcheck.check(repo, hints=False)
    assert ids(problems) == {
        ("skeleton-not-stub", "lessons/l02_softmax.py"),
        ("skeleton-stale", "lessons/l02_softmax.py"),
    }
    solved = next(p for p in problems if p.id == "skeleton-not-stub")
    assert "(passed)" in solved.message and "solved by accident" in solved.message


def test_the_generator_reproduces_every_checked_in_skeleton_byte_for_byte():
    lessons = load_catalog().available()
    assert len(lessons) >= 9
    for lesson in lessons:
        source = lesson.solution.read_text(encoding="utf-8")
        generated = lesson_source.skeleton(source, lesson, lesson.file_name)
        assert generated.encode("utf-8") == lesson.skeleton.read_bytes(), lesson.module
        assert lesson_source.BEGIN not in generated and lesson_source.END not in generated
        assert (ast.get_docstring(ast.parse(generated)) or "").endswith(lesson_source.edit_line(lesson))


def test_a_skeleton_is_the_solution_with_each_region_stubbed_at_its_indentation():
    lesson = load_catalog().by_module("l02_softmax")
    source = '''"""Lesson text.
"""

import numpy as np


def helper(x):
    return x + 1


def softmax(x, axis=-1):
    """Softmax.

    TODO:
      1. Do it.
    """
    ### BEGIN SOLUTION
    # Why: the explanation.
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)
    ### END SOLUTION
'''
    assert (
        lesson_source.skeleton(source, lesson)
        == '''"""Lesson text.

Edit this file, then run `course check 2`.
"""

import numpy as np


def helper(x):
    return x + 1


def softmax(x, axis=-1):
    """Softmax.

    TODO:
      1. Do it.
    """
    raise NotImplementedError
'''
    )
    split = lesson_source.parse(source)
    assert split.text == "Lesson text." and split.header == "import numpy as np\n"
    assert [(f.name, f.regions) for f in split.functions] == [("helper", 0), ("softmax", 1)]
    assert split.functions[1].solution.endswith("    ### END SOLUTION")
    assert split.functions[1].skeleton.endswith('    """\n    raise NotImplementedError')
    shown = lesson_source.without_markers(source)  # what `course solution` prints
    assert "### " not in shown and "# Why: the explanation." in shown and "1. Do it." in shown


def test_an_edited_solution_makes_the_skeleton_stale_until_the_command_writes_it(repo):
    edit(
        repo / "solutions" / "l01_projections.py",
        "def linear(x, w, b=None):",
        "def linear(x, w, b=None, out=None):",
    )
    (repo / "lessons" / "l03_attention.py").unlink()
    problems = devcheck.check(repo, grade=False)
    assert ids(problems) == {
        ("skeleton-stale", "lessons/l01_projections.py"),
        ("missing-file", "lessons/l03_attention.py"),
    }
    stale = next(p for p in problems if p.id == "skeleton-stale")
    assert "course dev skeletons" in stale.message and "edit the solution" in stale.message
    done = run_cli("--root", str(repo), command="skeletons")
    assert done.exit_code == 0, done.output
    assert done.output.splitlines() == [
        "wrote lessons/l01_projections.py",
        "wrote lessons/l03_attention.py",
        f"course dev skeletons: 2 skeleton(s) changed in {repo.resolve()}.",
    ]
    assert "def linear(x, w, b=None, out=None):" in (repo / "lessons" / "l01_projections.py").read_text()
    assert (repo / "lessons" / "l03_attention.py").read_bytes() == (
        REPO / "lessons" / "l03_attention.py"
    ).read_bytes()
    assert devcheck.check(repo, grade=False) == []
    again = run_cli("--root", str(repo), command="skeletons")
    assert again.exit_code == 0 and "no skeleton(s) changed" in again.output


def test_an_edited_skeleton_is_reported_stale(repo):
    edit(repo / "lessons" / "l02_softmax.py", "a softmax that never overflows", "a stable softmax")
    problems = devcheck.check(repo, grade=False)
    assert ids(problems) == {("skeleton-stale", "lessons/l02_softmax.py")}
    assert "solutions/l02_softmax.py" in problems[0].message


def test_an_exercise_without_a_solution_region_is_reported(repo):
    solution = repo / "solutions" / "l04_masks.py"
    text = solution.read_text()
    start = text.index("def padding_mask(")
    begin = text.index("    ### BEGIN SOLUTION\n", start)
    end = text.index("    ### END SOLUTION\n", start)
    solution.write_text(
        text[:begin] + text[begin:end].replace("### BEGIN SOLUTION", "# solved") + text[end + 21 :]
    )
    problems = devcheck.check(repo, grade=False)
    assert ids(problems) == {
        ("missing-solution-region", "solutions/l04_masks.py"),
        ("skeleton-stale", "lessons/l04_masks.py"),
    }
    missing = next(p for p in problems if p.id == "missing-solution-region")
    assert missing.message.startswith("padding_mask has no solution region")


def test_an_unclosed_solution_region_is_one_problem_naming_the_line(repo):
    solution = repo / "solutions" / "l05_heads.py"
    text = solution.read_text()
    solution.write_text(text[::-1].replace("### END SOLUTION"[::-1], "# end"[::-1], 1)[::-1])
    problems = devcheck.check(repo, grade=False)
    assert ids(problems) == {("solution-region-error", "solutions/l05_heads.py")}
    assert "never ends" in problems[0].message and "line " in problems[0].message
    done = run_cli("--root", str(repo), command="skeletons")
    assert done.exit_code == 1 and "never ends" in done.output


def test_a_missing_function_is_reported(repo):
    edit(repo / "solutions" / "l05_heads.py", "def merge_heads(x):", "def merge_heads_(x):")
    problems = devcheck.check(repo, grade=False)
    assert ids(problems) == {
        ("missing-function", "solutions/l05_heads.py"),
        ("skeleton-stale", "lessons/l05_heads.py"),
    }


def test_a_missing_todo_list_is_reported(repo):
    edit(
        repo / "solutions" / "l01_projections.py",
        """    TODO:
      1. Unpack the sizes: H, D, K = w_heads.shape.
      2. Move the head axis after D: (H, D, K) -> (D, H, K), so that each input row d holds the""",
        "    Steps:",
    )
    problems = devcheck.check(repo, grade=False)
    assert ids(problems) == {
        ("missing-todo", "solutions/l01_projections.py"),
        ("skeleton-stale", "lessons/l01_projections.py"),
    }
    todo = next(p for p in problems if p.id == "missing-todo")
    assert todo.message.startswith("fuse_head_weights's docstring has no numbered TODO")


def test_stray_files_are_reported(repo):
    (repo / "lessons" / "l10_notes.py").write_text("x = 1\n")
    (repo / "tests" / "mistakes" / "old.toml").write_text("")
    problems = devcheck.check(repo, grade=False)
    assert ids(problems) == {
        ("stray-file", "lessons/l10_notes.py"),
        ("stray-file", "tests/mistakes/old.toml"),
    }


def test_a_grading_test_without_an_exercise_marker_is_reported(repo):
    tests = repo / "tests" / "lessons" / "test_l02_softmax.py"
    floating = 'def test_floating_check(lesson):\n    """a check of no exercise"""\n'
    tests.write_text(tests.read_text() + "\n\n" + floating)
    problems = devcheck.check(repo, hints=False)
    assert ids(problems) == {
        ("untied-test", "tests/lessons/test_l02_softmax.py"),
        ("manifest-stale", "course/content/grading_manifest.json"),
    }
    untied = next(p for p in problems if p.id == "untied-test")
    assert "test_floating_check" in untied.message


def test_an_unreadable_catalog_is_one_problem(repo):
    (repo / "course" / "content" / "catalog.toml").write_text("[[lessons]\n")
    assert [p.id for p in devcheck.check(repo)] == ["catalog-unreadable"]


def test_a_folder_that_is_not_the_course_is_a_usage_error(tmp_path):
    done = run_cli("--root", str(tmp_path))
    assert done.exit_code == 2
    assert "not a clone of the course" in " ".join(done.output.split())


def test_a_todo_step_or_an_early_hint_that_writes_the_numpy_call_is_reported(repo):
    solution = repo / "solutions" / "l01_projections.py"
    text = solution.read_text()
    at = text.index("    TODO:\n") + len("    TODO:\n")
    solution.write_text(
        text[:at] + "      1. Return np.repeat(x, 2, axis=1), then x.reshape(B, T, D).\n" + text[at:]
    )
    catalog = repo / "course" / "content" / "catalog.toml"
    text = catalog.read_text()
    at = text.index("hints = [\n") + len("hints = [\n")
    catalog.write_text(text[:at] + "    \"Use np.einsum('bi,ij->bj', x, w).\",\n" + text[at:])
    problems = devcheck.check(repo, grade=False)
    dictating = [p for p in problems if p.id == "code-in-todo" and p.message.startswith("linear's")]
    assert [p.file for p in dictating] == ["solutions/l01_projections.py", "course/content/catalog.toml"]
    assert "np.repeat(" in dictating[0].message and ".reshape(" in dictating[0].message
    assert "hint 1" in dictating[1].message and "np.einsum(" in dictating[1].message
    # The last tier may write the code: the same call there is no problem.
    catalog.write_text(
        text.replace(
            '"Return x @ w when b is None', "\"np.einsum('bi,ij->bj', x, w). Return x @ w when b is None", 1
        )
    )
    after = devcheck.check(repo, grade=False)
    assert not [
        p for p in after if p.file == "course/content/catalog.toml" and p.message.startswith("linear's")
    ]


def test_the_glossary_is_checked_against_the_copys_catalog(repo):
    """The cut copy has no glossary (nothing to check); given the course's, every lesson it names
    beyond the copy's six is reported, and the numbers of those lessons are not evaluated."""
    shutil.copy(REPO / "course" / "content" / "glossary.toml", repo / "course" / "content" / "glossary.toml")
    found = [problem for problem in devcheck.check(repo, grade=False) if problem.id.startswith("glossary-")]
    assert found and {problem.id for problem in found} == {"glossary-lesson"}
    assert "The term 'head pruning' names lesson '11', which the catalog does not list." in [
        problem.message for problem in found
    ]
