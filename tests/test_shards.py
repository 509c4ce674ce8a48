"""Issue 31: a class graded in shards on several machines, merged into the gradebook one run
gives, and the templates that run the shards on GitHub Actions and Kubernetes."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from course.content.catalog import load_catalog
from course.instructor.classroom import engines, gradebook
from course.instructor.classroom.shards import Shard, ShardError
from tests.helpers import SOLUTIONS, mistaken_source

L01 = load_catalog().by_module("l01_projections")
SOLVED = (SOLUTIONS / "l01_projections.py").read_text()
WRONG = mistaken_source("l01_projections", "fuse_interleaved")
OTHER_WRONG = mistaken_source("l01_projections", "head_projections_float64_out")
TIMINGS = ("duration", "learner_seconds")


def test_a_shard_is_k_of_n_and_anything_else_is_refused_in_one_line():
    assert Shard.parse("2/3") == Shard(2, 3) and str(Shard(2, 3)) == "2/3"
    for bad in ("0/3", "4/3", "3", "a/b", "1/0", "-1/2"):
        with pytest.raises(ShardError):
            Shard.parse(bad)


def test_every_name_is_in_exactly_one_shard_and_stays_there_when_others_arrive():
    names = [f"student{i:03d}.zip" for i in range(200)]
    for count in (1, 2, 3, 7):
        homes = [[k for k in range(1, count + 1) if Shard(k, count).holds(name)] for name in names]
        assert all(len(home) == 1 for home in homes)
        assert all(Shard(home[0], count).holds(name) for home, name in zip(homes, names, strict=True))
    sizes = [sum(Shard(k, 3).holds(name) for name in names) for k in (1, 2, 3)]
    assert min(sizes) > 40  # a stable hash spreads the class


def bundle(folder: Path, name: str, source: str) -> None:
    with zipfile.ZipFile(folder / name, "w") as made:
        made.writestr("l01_projections.py", source)


def names_in_other_shards(count: int) -> tuple[str, str]:
    """Two file names that fall in different shards of ``count``."""
    first = "twin-a.zip"
    home = next(k for k in range(1, count + 1) if Shard(k, count).holds(first))
    other = next(f"twin-{i}.zip" for i in range(1000) if not Shard(home, count).holds(f"twin-{i}.zip"))
    return first, other


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict:
    """One class graded in one run and in three shards (in this process, as `course grade`
    does): two identical wrong bundles in different shards, a solution, a wrong one, a broken
    zip."""
    root = tmp_path_factory.mktemp("class")
    folder = root / "inbox"
    folder.mkdir()
    one, other = names_in_other_shards(3)
    for name, source in {one: WRONG, other: WRONG, "ada.zip": SOLVED, "bob.zip": OTHER_WRONG}.items():
        bundle(folder, name, source)
    (folder / "dave.zip").write_text("not a zip")
    whole = gradebook.grade_folder(folder, [L01], 1)
    gradebook.write_json(whole, root / "whole.json")
    gradebook.write_csv(whole, root / "whole.csv")
    paths = []
    for k in (1, 2, 3):
        part = gradebook.grade_folder(folder, [L01], 1, shard=Shard(k, 3))
        gradebook.write_json(part, root / f"shard-{k}.json")
        paths.append(root / f"shard-{k}.json")
    merged = gradebook.merge(paths)
    gradebook.write_json(merged, root / "merged.json")
    gradebook.write_csv(merged, root / "merged.csv")
    return {"root": root, "twins": (one, other), "shards": paths, "merged": merged, "whole": whole}


def rows_without_timings(path: Path) -> list[dict]:
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in TIMINGS}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(json.loads(path.read_text())["submissions"])


def test_shards_merged_equal_one_run_row_for_row(graded):
    root = graded["root"]
    assert (root / "merged.csv").read_text() == (root / "whole.csv").read_text()
    assert rows_without_timings(root / "merged.json") == rows_without_timings(root / "whole.json")
    sizes = [len(json.loads(path.read_text())["submissions"]) for path in graded["shards"]]
    assert sum(sizes) == 5 and max(sizes) < 5  # split, not one shard holding all


def test_identical_bundles_in_different_shards_are_flagged_as_one_run_flags_them(graded):
    one, other = graded["twins"]
    homes = [json.loads(path.read_text())["submissions"] for path in graded["shards"]]
    where = {row["file"]: index for index, rows in enumerate(homes) for row in rows}
    assert where[one] != where[other]
    for rows in homes:  # a shard alone cannot see its twin
        for row in rows:
            if row["file"] in (one, other):
                assert not any(other in p or one in p for p in row["problems"])
    merged = {row["file"]: row for row in graded["merged"].rows}
    assert any(f"same code as {other}" in problem for problem in merged[one]["problems"])
    assert any(f"same code as {one}" in problem for problem in merged[other]["problems"])


@pytest.mark.parametrize(
    "change, words",
    [
        ({"course_version": "0.0.1"}, "other course version"),
        ({"max_points": {"l01_projections": 18, "l02_softmax": 31}}, "other lessons"),
        ({"inputs": "secret 0123456789abcdef"}, "other inputs"),
        ({"shard": "1/4"}, "split the class differently"),
    ],
)
def test_merge_refuses_shards_not_graded_alike(graded, tmp_path, change, words):
    first = json.loads(graded["shards"][0].read_text())
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({**first, **change}))
    with pytest.raises(ShardError, match=words):
        gradebook.merge([odd, *graded["shards"][1:]])


def test_merge_refuses_shards_of_another_course_version_than_its_own(graded, tmp_path):
    renamed = []
    for path in graded["shards"]:
        report = json.loads(path.read_text())
        renamed.append(tmp_path / path.name)
        renamed[-1].write_text(json.dumps({**report, "course_version": "0.0.1"}))
    with pytest.raises(ShardError, match="merge with the version that graded them"):
        gradebook.merge(renamed)


def test_merge_refuses_a_missing_or_repeated_shard_and_a_file_that_is_no_report(graded, tmp_path):
    one, two, three = graded["shards"]
    with pytest.raises(ShardError, match="missing 3/3"):
        gradebook.merge([one, two])
    with pytest.raises(ShardError, match="given twice"):
        gradebook.merge([one, one, two, three])
    (tmp_path / "notes.json").write_text("[1, 2]")
    with pytest.raises(ShardError, match="not a report"):
        gradebook.merge([tmp_path / "notes.json"])


def course(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "course", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=dict(os.environ, NO_COLOR="1", COLUMNS="200"),
    )


def test_merge_writes_every_output_and_exits_as_course_grade_does(graded, tmp_path):
    shards = [str(path) for path in graded["shards"]]
    done = course(
        "gradebook",
        "merge",
        *shards,
        "--out",
        "g.csv",
        "--junit",
        "j.xml",
        "--nbgrader-csv",
        "n.csv",
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # rows need a look: a flag, a refused zip
    assert "Merged 3 reports: 5 submissions" in " ".join(done.stdout.split())
    assert len(list(csv.DictReader((tmp_path / "g.csv").open()))) == 5
    assert (tmp_path / "j.xml").read_text().startswith("<?xml") and (tmp_path / "n.csv").is_file()
    refused = course("gradebook", "merge", shards[0], cwd=tmp_path)
    assert refused.returncode == 2 and "missing" in refused.stdout and "Traceback" not in refused.stderr


# ---------------------------------------------------------------- the engines' templates
def test_the_github_actions_workflow_validates_against_githubs_schema(tmp_path):
    done = course(
        "gradebook", "github-actions", str(tmp_path), "--shards", "3", "--lessons", "1,2", cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    path = tmp_path / ".github" / "workflows" / "grade-class.yml"
    checked = subprocess.run(
        [
            str(Path(sys.executable).parent / "check-jsonschema"),
            "--builtin-schema",
            "vendor.github-workflows",
            str(path),
        ],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    workflow = yaml.safe_load(path.read_text())
    assert workflow["jobs"]["grade"]["strategy"]["matrix"]["shard"] == [1, 2, 3]
    assert workflow["jobs"]["merge"]["needs"] == "grade"


def test_the_kubernetes_job_validates_and_maps_its_0_based_index_to_shard_k(tmp_path):
    import kubernetes_validate

    out = tmp_path / "job.yaml"
    done = course(
        "gradebook",
        "kubernetes",
        str(out),
        "--image",
        "registry.example/course:0.1.0",
        "--shards",
        "4",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    job = yaml.safe_load(out.read_text())
    kubernetes_validate.validate(job, kubernetes_validate.utils.latest_version(), strict=True)
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"]) == ("Indexed", 4)
    command = spec["template"]["spec"]["containers"][0]["command"][-1]
    assert "k=$((JOB_COMPLETION_INDEX + 1))" in command and '--shard "$k/4"' in command


def test_the_workflows_shard_and_merge_steps_pass_when_rows_need_a_look_and_say_so(graded, tmp_path):
    """The steps' own commands, run as the runner runs them: course grade exits 1 (a flagged
    row, a refused zip), yet each shard's step passes; the merge step passes with a warning."""
    (tmp_path / "repo").mkdir()
    course(
        "gradebook",
        "github-actions",
        str(tmp_path / "repo"),
        "--shards",
        "2",
        "--lessons",
        "1",
        "--submissions",
        "inbox",
        cwd=tmp_path,
    )
    workflow = yaml.safe_load((tmp_path / "repo" / ".github" / "workflows" / "grade-class.yml").read_text())
    [grade_step] = [
        s for s in workflow["jobs"]["grade"]["steps"] if str(s.get("name", "")).startswith("Grade shard")
    ]
    [merge_step] = [s for s in workflow["jobs"]["merge"]["steps"] if s.get("name") == "Merge the shards"]
    (tmp_path / "repo" / "inbox").symlink_to(graded["root"] / "inbox")
    env = dict(os.environ, NO_COLOR="1", PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    for shard in ("1", "2"):
        run = grade_step["run"].replace("${{ matrix.shard }}", shard)
        done = subprocess.run(
            ["bash", "-c", run], cwd=tmp_path / "repo", env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
    merged = subprocess.run(
        ["bash", "-c", merge_step["run"]], cwd=tmp_path / "repo", env=env, capture_output=True, text=True
    )
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "::warning::some submissions need a look" in merged.stdout
    assert len(list(csv.DictReader((tmp_path / "repo" / "gradebook.csv").open()))) == 5


def test_a_template_shard_step_fails_when_the_grade_is_a_usage_error(tmp_path):
    run = engines.SHARD_COMMAND.format(submissions="missing", lessons="1", shard="1", count=2, reports=".")
    env = dict(os.environ, NO_COLOR="1", PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    done = subprocess.run(["bash", "-c", run], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode != 0


def test_a_grade_whose_reader_goes_away_still_writes_its_gradebook(graded, tmp_path):
    """`course grade ... | head -1`: the progress lines go nowhere once `head` has gone, the
    gradebook is written all the same, the exit code is the usual one, nothing is raised."""
    inbox = graded["root"] / "inbox"
    script = (
        f'course grade "{inbox}" --lessons 1 --workers 1 --out g.csv | head -1; exit "${{PIPESTATUS[0]}}"'
    )
    env = dict(os.environ, NO_COLOR="1", PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.stdout.startswith("Grading 5 submissions") and done.stdout.count("\n") == 1
    assert done.returncode == 1 and done.stderr == "", done.stderr  # rows need a look, as ever
    assert len(list(csv.DictReader((tmp_path / "g.csv").open()))) == 5
