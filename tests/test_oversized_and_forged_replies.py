"""What the worker's side sends and what lies in the learner's folder cannot crash the grader or
make it blame itself (issue 10, items 5-7): a lesson file of gigabytes is refused by its size,
never read; a reply is read only within its bounds (``messages.REPLY_*``); a malformed one is the
learner's error. The hostile cases ``tests/hostile/forged_*`` grade forged replies end to end;
these tests check what those cannot: a sparse 6 GiB file, and the grader's own memory."""

from __future__ import annotations

import io
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from course.engine.calls import errors
from course.engine.calls import replies as call_checks
from course.engine.grading import plugin
from course.engine.results import ERROR
from course.engine.wire import messages
from tests.helpers import SOLUTIONS, grade_folder
from tests.test_hostile_learners import parse

HOSTILE = Path(__file__).parent / "hostile"


def solutions_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    shutil.copytree(SOLUTIONS, folder, ignore=shutil.ignore_patterns("__pycache__", ".*"))
    return folder


def sparse(path: Path, size: int) -> None:
    """A valid first line, then holes up to ``size`` bytes: no disk used, and never read."""
    with open(path, "wb") as handle:
        handle.write(b"import numpy as np\n")
        handle.truncate(size)


def graded_measured(folder: Path, module: str) -> tuple[dict, int]:
    """``python -m course.engine FOLDER MODULE``'s JSON result, and the peak resident memory in
    MiB of the grader and its workers, read in a fresh process that runs it (so no other test's
    children count)."""
    measure = (
        "import resource, subprocess, sys; "
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
        "sys.stderr.write(done.stderr); "
        "sys.stdout.write(done.stdout + '\\n' + str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))"
    )
    done = subprocess.run(
        [sys.executable, "-c", measure, sys.executable, "-m", "course.engine", str(folder), module],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    output, _, peak_kib = done.stdout.rpartition("\n")
    return json.loads(output), int(peak_kib) // 1024


def test_a_lesson_file_of_gigabytes_is_refused_by_its_size_never_read(tmp_path):
    folder = solutions_copy(tmp_path)
    sparse(folder / "l01_projections.py", 6 * 2**30)
    result, peak = graded_measured(folder, "l01_projections")
    assert result["status"] == ERROR
    assert result["message"].startswith("l01_projections.py is 6.0 GiB; a lesson file must be under 1 MiB")
    assert all(check["status"] == ERROR for e in result["exercises"] for check in e["checks"])
    assert peak < 300, f"the grader reached {peak} MiB"


def test_an_earlier_lesson_file_it_imports_is_size_checked_too(tmp_path):
    folder = solutions_copy(tmp_path)
    sparse(folder / "l02_softmax.py", 3 * 2**20)  # lesson 3 imports lesson 2's softmax
    result = grade_folder(folder, "3")
    assert result["status"] == ERROR
    assert result["message"].startswith("l02_softmax.py is 3.0 MiB; a lesson file must be under 1 MiB")


def test_a_forged_import_report_of_3000_big_arrays_is_refused_and_the_grader_stays_small(tmp_path):
    """The forged report announces 3000 arrays of 1 MiB and sends them; the grader refuses the
    announcement before reading any of them."""
    folder = solutions_copy(tmp_path)
    _, files = parse(HOSTILE / "forged_import_report_announcing_thousands_of_big_arrays.py")
    (folder / "l01_projections.py").write_bytes(files["l01_projections.py"])
    result, peak = graded_measured(folder, "l01_projections")
    assert result["status"] == ERROR
    assert "too large (3,000 arrays announced" in result["message"]
    assert peak < 300, f"the grader (or its worker) reached {peak} MiB"


def message(header: bytes, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(header)) + header + payload


@pytest.mark.parametrize(
    ("raw", "bounds", "says"),
    [
        (message(b"[" * 200_000 + b"]" * 200_000), {}, "nested too deeply"),
        (
            message(json.dumps({"arrays": [["<f8", [1]]] * 5}).encode()),
            {"max_arrays": 4},
            "5 arrays announced",
        ),
        (message(json.dumps({"arrays": [["<f8", [2**17]]] * 2}).encode()), {"max_bytes": 2**20}, "2.0 MiB"),
        (message(b"{}" + b" " * 100), {"max_header": 100}, "a header of 0.0 MiB"),
        (message(json.dumps({"arrays": [["<f8", [float("inf")]]]}).encode()), {}, "bad array description"),
        (message(json.dumps({"arrays": [["<f8", [2**40, 2**40]]]}).encode()), {}, "an array of"),
    ],
)
def test_unpack_refuses_before_reading_what_it_will_not_hold(raw, bounds, says):
    stream = io.BytesIO(raw + b"\0" * 64)  # never read this far: the payload was never sent
    with pytest.raises(messages.ProtocolError, match=says):
        messages.unpack(stream.read, **bounds)


@pytest.mark.parametrize(
    "tagged",
    [
        {"zz": 1},
        {"v": [1]},
        {"a": True},
        {"a": 0, "scalar": "yes"},
        {"l": [{"v": 1}] * 65},
        {"o": 1},
        {"a": 0, "v": 1},
    ],
)
def test_decode_refuses_unknown_tags_and_wrong_types(tagged):
    with pytest.raises(messages.ProtocolError):
        messages.decode(tagged, [messages.np.zeros(2)])


def test_a_malformed_reply_is_the_learners_error_never_the_graders():
    problem = messages.ProtocolError("header nested too deeply")
    status, text = plugin.classify(problem)
    assert status == ERROR and "not your fault" not in text and "malformed" in text
    status, text = plugin.classify(errors.LearnerError(call_checks.malformed_reply(messages.TooLarge("x"))))
    assert status == ERROR and "too large" in text
