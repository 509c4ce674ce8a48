"""A grader that cannot be fooled, hung or crashed: every case in tests/hostile/ is graded by the
real `course check`, and for each of them

- the check ends within its limits (tightened with COURSE_LIMITS so the suite stays quick),
- the result is not "passed", in the JSON, the exit code and the saved progress,
- the JSON is complete (every exercise of the lesson, every check with a known status),
- the screen fits one screen, shows no traceback of ours and no raw escape sequence,
- the messages say what happened (each case names words they must contain),
- no process is left running (found by a tag in the environment of every process of the check:
  the variable COURSE_HOSTILE_TAG, and for workers, which get an allow-list of it, their HOME
  and TMPDIR, made under a temporary folder named after the tag),
  and neither lessons/ nor the learner's files changed.

A case is one file. Its header lines say `# lesson: N`, `# expect: words` (repeatable; every one
must appear in the messages), optionally `# seconds: N` (default 20) and `# limits: call=5,...`
(entries that replace the suite's defaults below, for a case whose verdict would otherwise
depend on which of two limits the machine's load lets it reach first). Then `# ---- NAME`
lines start the files to put in the workspace: the lesson file itself, and anything else (a
conftest.py, a numpy.py, a file in a subfolder ...); a file whose content is the line `<delete>`
is removed, one whose content is `<solution>` is the lesson's solution (`<solution of
l01_projections.py>`: that lesson's, for a file of another name). Earlier lessons are copied from
the solutions.

Both checks of a case are real `course check` processes: the JSON one proves the verdict, the
screen one the rendering, and screen mode also runs the learner's code for shape traces and
attention maps. They run with the result cache on (course/workspace/result_cache.py, in a folder of the
case's own), as a learner's do: a failed grade that another run would give again is reused by
the screen check, so what the learner's code did during the first check (the cache folder
included) must not turn the second into a pass. The workspace they grade is a copy of one
made by a real `course init` per test process (tests/test_cli.py tests `course init` itself).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from course.content.catalog import load_catalog
from course.engine.results import STATUSES
from tests.helpers import LESSONS, SOLUTIONS

CASES = sorted((Path(__file__).parent / "hostile").glob("*.py"))
LIMITS = {"call": "1", "import": "2", "run": "15", "memory": "768M"}
SCREEN_LINES = 60


def parse(path: Path) -> tuple[dict, dict[str, bytes]]:
    meta: dict = {"expect": []}
    files: dict[str, bytes] = {}
    current = None
    for line in path.read_bytes().splitlines(keepends=True):
        heading = re.match(rb"# ---- (\S+)\s*$", line)
        if heading:
            current = heading.group(1).decode()
            files[current] = b""
        elif current is not None:
            files[current] += line
        else:
            key, _, value = line.decode().lstrip("# ").partition(":")
            if key.strip() == "expect":
                meta["expect"].append(value.strip())
            elif key.strip():
                meta[key.strip()] = value.strip()
    return meta, files


def course_limits(meta: dict) -> str:
    """COURSE_LIMITS for a case: the suite's defaults, with the case's own entries instead."""
    limits = dict(LIMITS)
    for entry in filter(None, (part.strip() for part in meta.get("limits", "").split(","))):
        key, _, value = entry.partition("=")
        assert key.strip() in LIMITS and value.strip(), f"unknown limit {entry!r}"
        limits[key.strip()] = value.strip()
    return ",".join(f"{key}={value}" for key, value in limits.items())


def tree_digest(folder: Path, skip: str = ".course") -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and skip not in p.parts
    }


def processes_tagged(tag: str) -> list[str]:
    """Running processes whose environment carries ``tag``: everything a check started (the
    worker, whatever learner code spawned), and nothing a test elsewhere on the machine did."""
    found = []
    needle = tag.encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    environ = handle.read()
                with open(f"/proc/{entry}/stat") as handle:
                    state = handle.read().rsplit(")", 1)[1].split()[0]
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    cmdline = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:
                continue
            if needle in environ and state != "Z":
                found.append(f"{entry}: {cmdline[:120]}")
    return found


def course(
    *args: str, cwd: Path, tag: str = "", limits: str = "", cache: Path | None = None
) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(
        os.environ,
        NO_COLOR="1",
        COLUMNS="100",
        COURSE_LIMITS=limits or course_limits({}),
        COURSE_SERVER="off",
        COURSE_HOSTILE_TAG=tag,
    )
    if cache is not None:  # the result cache on, in a folder of the case's own
        env.update(COURSE_CACHE="on", XDG_CACHE_HOME=str(cache))
    if tag:
        # Workers get an allow-list of the environment, not the tag; their HOME and TMPDIR are
        # their scratch folder, made under this TMPDIR, whose name carries the tag instead.
        scratch = Path(tempfile.gettempdir()) / tag
        scratch.mkdir(exist_ok=True)
        env["TMPDIR"] = str(scratch)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "course", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    return done, time.monotonic() - started


@pytest.fixture(scope="session")
def fresh_workspace(tmp_path_factory) -> Path:
    """A workspace made by a real `course init`, once per test process: each case grades a copy."""
    folder = tmp_path_factory.mktemp("init")
    init, _ = course("init", "ws", cwd=folder)
    assert init.returncode == 0, init.stdout
    return folder / "ws"


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_a_hostile_or_broken_lesson_file_is_graded_safely(path, tmp_path, fresh_workspace):
    meta, files = parse(path)
    lesson = load_catalog().resolve(meta["lesson"])
    tag = f"hostile-{path.stem}-{os.getpid()}-{time.monotonic_ns()}"
    limits = course_limits(meta)
    workspace = tmp_path / "ws"
    shutil.copytree(fresh_workspace, workspace)
    for earlier in load_catalog().lessons[: lesson.number - 1]:
        shutil.copy(SOLUTIONS / earlier.file_name, workspace)
    for name, content in files.items():
        solution = re.fullmatch(rb"<solution(?: of (\S+))?>\n", content)
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        if content == b"<delete>\n":
            (workspace / name).unlink()
        elif solution:
            shutil.copy(SOLUTIONS / (solution.group(1) or name.encode()).decode(), workspace / name)
        else:
            (workspace / name).write_bytes(content)
    pristine, learner = tree_digest(LESSONS), tree_digest(workspace)
    limit = float(meta.get("seconds", 20))

    cache = tmp_path / "cache"
    done, seconds = course("check", lesson.id, "--json", cwd=workspace, tag=tag, limits=limits, cache=cache)
    assert seconds < limit, f"the check took {seconds:.1f} s"
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["status"] != "passed"
    assert [e["name"] for e in result["exercises"]] == [e.name for e in lesson.exercises]
    for exercise in result["exercises"]:
        assert exercise["checks"] and exercise["status"] in STATUSES + ("error",)
        assert all(check["status"] in STATUSES for check in exercise["checks"])
    messages = " ".join(
        [result["message"], result["note"], result["notice"]]
        + [check["message"] for e in result["exercises"] for check in e["checks"]]
    )
    for words in meta["expect"]:
        assert words.lower() in " ".join(messages.split()).lower(), (
            f"no message says {words!r}:\n{messages[:2500]}"
        )
    assert "the grader itself hit a problem" not in messages.lower(), messages[:2500]

    screen, _ = course("check", lesson.id, cwd=workspace, tag=tag, limits=limits, cache=cache)
    text = screen.stdout.decode("utf-8", "replace")
    assert screen.returncode == 1 and screen.stderr == b""
    assert len(text.splitlines()) <= SCREEN_LINES, text
    assert "Traceback (most recent call last)" not in text
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", text), "a control character reached the screen"
    assert not re.search(r"^::", text, re.MULTILINE)  # no GitHub workflow command reaches CI

    state = json.loads((workspace / ".course" / "state.json").read_text())
    assert state["lessons"][lesson.module]["status"] != "passed"
    assert tree_digest(LESSONS) == pristine, "lessons/ changed"
    assert tree_digest(workspace) == learner, "the learner's files changed"
    deadline = time.monotonic() + 3
    while processes_tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_tagged(tag) == []
    shutil.rmtree(Path(tempfile.gettempdir()) / tag, ignore_errors=True)
