"""Every lesson module renamed (l03_attention -> m03_attention, ...) in a copy of the course:
the package names no lesson, so the copy still draws attention maps, shape traces and names
misconceptions, all found through the catalog and the lessons' own files."""

import json
import re

import pytest

from course.content.catalog import load_catalog
from tests.course_copy import copy_course, course, lesson_data_files, ready_workspace, rename_lessons
from tests.helpers import mistaken_source

RENAMES = {lesson.module: "m" + lesson.module[1:] for lesson in load_catalog().lessons}


@pytest.fixture(scope="module")
def renamed(tmp_path_factory):
    """(copy, workspace): the renamed course, and a workspace of it holding every solution."""
    root = copy_course(tmp_path_factory.mktemp("renamed") / "copy")
    rename_lessons(root, RENAMES)
    return root, ready_workspace(root)


def test_no_old_lesson_name_is_left_in_the_copys_lesson_data(renamed):
    root, _ = renamed
    old = re.compile("|".join(RENAMES))
    for path in lesson_data_files(root):
        assert not old.search(path.name), path
        if path.suffix in (".py", ".toml"):
            assert not old.search(path.read_text(encoding="utf-8")), path
    assert (root / "tests" / "lessons" / "pictures_m03_attention.py").is_file()


def test_the_renamed_attention_lesson_still_draws_its_map(renamed):
    root, workspace = renamed
    done = course(root, "show", "3", "--map", cwd=workspace)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "yours" in done.stdout and "reference" in done.stdout and "|difference|" in done.stdout
    assert "Every row sums to 1 and stays within the mask." in done.stdout


def test_a_renamed_multi_head_lesson_still_traces_shapes_under_a_failed_check(renamed):
    root, workspace = renamed
    broken = mistaken_source("l05_heads", "split_no_swap")
    for old, new in RENAMES.items():
        broken = broken.replace(old, new)
    (workspace / "m05_heads.py").write_text(broken)
    try:
        done = course(root, "check", "6", cwd=workspace)
    finally:
        (workspace / "m05_heads.py").write_text((root / "solutions" / "m05_heads.py").read_text())
    flat = " ".join(done.stdout.split())
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Shapes through your code (B=7 T=3 S=5 H=4 K=6 D=24 G=2)" in flat
    assert "split_heads gave (B, T, H, K) where (B, H, T, K) was expected" in flat


def test_a_renamed_attention_lesson_still_names_the_missing_scale_misconception(renamed):
    root, workspace = renamed
    source = mistaken_source("l03_attention", "missing_scale")
    for old, new in RENAMES.items():
        source = source.replace(old, new)
    (workspace / "m03_attention.py").write_text(source)
    try:
        done = course(root, "check", "3", "--json", cwd=workspace)
    finally:
        (workspace / "m03_attention.py").write_text((root / "solutions" / "m03_attention.py").read_text())
    result = json.loads(done.stdout)
    assert done.returncode == 1 and result["lesson"] == "m03_attention"
    labels = {c["misconception"] for e in result["exercises"] for c in e["checks"] if c.get("misconception")}
    assert "missing-scale" in labels


def test_no_string_in_the_package_code_is_a_lesson_module_name():
    import ast

    from tests.course_copy import REPO

    lesson_name = re.compile(r"l\d{2}_[a-z_]+")
    found = [
        (str(path.relative_to(REPO)), node.value)
        for path in sorted((REPO / "course").rglob("*.py"))
        if "_data" not in path.parts
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and lesson_name.fullmatch(node.value)
    ]
    assert found == []
