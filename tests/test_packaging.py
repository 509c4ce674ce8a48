"""A plain (non-editable) install carries skeletons and grading tests and grades outside a clone."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from course.content.catalog import load_catalog
from tests.helpers import REPO, SOLUTIONS

pytest.importorskip("hatchling", reason="building the wheel needs hatchling (the dev extra)")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    return next(out.glob("*.whl"))


def test_the_wheel_holds_catalog_skeletons_solutions_and_grading_tests(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "course/content/catalog.toml" in names and "course/content/glossary.toml" in names
    for shipped in ("weights.npz", "card.json", "README.md", "__init__.py", "measure.py"):
        assert f"course/tiny_model/{shipped}" in names  # lessons 10-11 study it offline
    for lesson in load_catalog().available():
        assert f"course/_data/lessons/{lesson.module}.py" in names
        assert f"course/_data/solutions/{lesson.module}.py" in names
        assert f"course/_data/grading/test_{lesson.module}.py" in names


def test_an_installed_course_grades_a_workspace_far_from_the_clone(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    env = dict(os.environ, PYTHONPATH=str(target), NO_COLOR="1")
    away = tmp_path / "elsewhere"
    away.mkdir()

    def course(*args):
        return subprocess.run(
            [sys.executable, "-m", "course", *args],
            cwd=away,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert course("init", "ws").returncode == 0
    first = course("check", "1", "--json", "--workspace", "ws")
    assert json.loads(first.stdout)["status"] == "not-started"
    shutil.copy(SOLUTIONS / "l01_projections.py", away / "ws")
    second = course("check", "1", "--json", "--workspace", "ws")
    assert second.returncode == 0 and json.loads(second.stdout)["status"] == "passed"
    imported_from = subprocess.run(
        [sys.executable, "-c", "import course; print(course.__file__)"],
        cwd=away,
        env=env,
        capture_output=True,
        text=True,
    ).stdout
    assert imported_from.startswith(str(target))


def test_a_classroom_template_installs_the_course_from_its_own_wheel_and_grades_as_exported(wheel, tmp_path):
    """`course classroom DIR --wheel W` puts the wheel in the template repository and installs
    it from there (the course is on no index); the exported command, run as the workflow runs
    it from a student's repository, grades a right file 1 and gives 0 to one that runs the
    installed course's reference solution."""
    template = tmp_path / "template"
    env = dict(os.environ, NO_COLOR="1")
    made = subprocess.run(
        [sys.executable, "-m", "course", "classroom", str(template), "--wheel", str(wheel), "--lessons", "1"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    test = json.loads((template / ".github" / "classroom" / "autograding.json").read_text())["tests"][0]
    assert test["setup"] == f"python -m pip install .classroom/{wheel.name}"
    workflow = (template / ".github" / "workflows" / "classroom.yml").read_text()
    assert json.dumps(test["setup"]) in workflow and json.dumps(test["run"]) in workflow
    site = tmp_path / "site"
    installed = subprocess.run(  # the setup line, without the dependencies this venv holds already
        [
            *test["setup"].replace("python", sys.executable, 1).split(),
            "--quiet",
            "--no-deps",
            "--target",
            str(site),
        ],
        cwd=template,
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr
    runner = dict(env, PYTHONPATH=str(site), PATH=f"{site / 'bin'}:{os.environ['PATH']}")
    shutil.copy(SOLUTIONS / "l01_projections.py", template)
    right = subprocess.run(
        ["bash", "-c", test["run"]], cwd=template, env=runner, capture_output=True, text=True
    )
    assert right.returncode == 0, right.stdout[-1000:]
    reference = next(site.rglob("solutions/l01_projections.py"))
    (template / "l01_projections.py").write_text(f"exec(open({str(reference)!r}).read())\n")
    copied = subprocess.run(
        ["bash", "-c", test["run"]], cwd=template, env=runner, capture_output=True, text=True
    )
    assert copied.returncode == 1, copied.stdout[-1000:]
    assert "instructor's secret" not in right.stdout  # no secret kept: the public inputs
    # The workflow's step keeps the repository's secret in a file; the grader action hands the
    # command PATH and HOME only, and the command reads the secret from there.
    step = yaml.safe_load(workflow)["jobs"]["run-autograding-tests"]["steps"]
    keep = next(s for s in step if "secrets.COURSE_GRADING_SECRET" in str(s.get("env")))
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(
        ["bash", "-c", keep["run"]],
        env=dict(HOME=str(home), COURSE_GRADING_SECRET="a-class-secret"),
        check=True,
    )
    (template / "l01_projections.py").write_text((SOLUTIONS / "l01_projections.py").read_text())
    action = {"PATH": runner["PATH"], "HOME": str(home), "PYTHONPATH": str(site), "NO_COLOR": "1"}
    secret = subprocess.run(
        ["bash", "-c", test["run"]], cwd=template, env=action, capture_output=True, text=True
    )
    assert secret.returncode == 0, secret.stdout[-1000:]
    assert "Graded with an instructor's secret" in " ".join(secret.stdout.split())
