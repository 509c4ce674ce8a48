"""`course bench N` on a solved workspace: the rows it measures (with and without torch), its
JSON, lesson 13's peak memory, the advice it reads from measurements, and its refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from course.bench import pytorch as bench_torch
from course.bench import run as bench
from course.bench.advice import FULL, REFERENCE, TORCH, YOURS, Row, advise
from course.cli import app
from course.content.catalog import load_catalog
from course.render.bench import bench_screen
from course.workspace import folder as ws
from course.workspace import state
from course.workspace.session import open_session
from tests.helpers import SOLUTIONS

PASSED = ("l01_projections", "l03_attention", "l05_heads", "l06_multi_head", "l13_online_softmax")


@pytest.fixture(scope="module")
def solved(tmp_path_factory) -> Path:
    """Every lesson file solved; lessons 1, 3, 5, 6 and 13 recorded as passed, 8 not."""
    folder = tmp_path_factory.mktemp("bench") / "workspace"
    catalog = load_catalog()
    created, added = ws.init(folder, catalog)
    for lesson in catalog.available():
        shutil.copy(SOLUTIONS / lesson.file_name, folder)
    recorded = state.State(welcomed=True, placed=[path.stem for path in added])
    for module in PASSED:
        recorded.lesson(module).status = "passed"
    state.save(recorded, created.state_path)
    return folder


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(bench, "BUDGET", 0.0)  # 3 timed calls each: the shape of the output is tested


def without_torch(monkeypatch) -> None:
    monkeypatch.setattr(bench_torch, "torch_module", lambda: None)


def run(folder: Path, lesson: str, sizes: str):
    session = open_session(str(folder))
    return bench.run_bench(session, session.catalog.resolve(lesson), sizes)


def text_of(renderable) -> str:
    console = Console(record=True, width=80, color_system=None)
    console.print(renderable)
    return console.export_text()


def invoke(*args: str):
    return CliRunner().invoke(app, ["bench", *args], env={"NO_COLOR": "1", "COLUMNS": "100"})


def test_without_torch_lesson_6_times_yours_and_the_reference_at_each_size_and_in_the_heads_probe(
    solved, monkeypatch
):
    without_torch(monkeypatch)
    report = run(solved, "6", "16,32")
    assert [(row.impl, row.size, row.probe) for row in report.rows] == [
        (YOURS, "B=2 T=16 D=128 H=8", False),
        (YOURS, "B=2 T=32 D=128 H=8", False),
        (YOURS, "B=2 T=16 D=128 H=8", True),
        (YOURS, "B=2 T=16 D=128 H=32", True),
        (REFERENCE, "B=2 T=16 D=128 H=8", False),
        (REFERENCE, "B=2 T=32 D=128 H=8", False),
        (REFERENCE, "B=2 T=16 D=128 H=8", True),
        (REFERENCE, "B=2 T=16 D=128 H=32", True),
    ]
    assert all(row.function == "multi_head_attention" and row.lesson == "06" for row in report.rows)
    assert all(row.ms >= row.best_ms > 0 and row.gflops > 0 for row in report.rows)
    assert all(row.peak_bytes is None for row in report.rows) and report.matmul_gflops > 0
    screen = text_of(bench_screen(report))
    assert "Lesson 06 · multi_head_attention" in screen and "GFLOP/s" in screen
    assert "PyTorch is not installed: `pip install torch` adds its rows." in screen
    assert "yours *" in screen and "not a grade" in screen
    assert report.advice and report.advice in " ".join(screen.split())


def test_lesson_13_measures_the_peak_memory_of_yours_and_the_full_matrix_and_torch_has_a_row_when_installed(
    solved,
):
    torch = bench_torch.torch_module()  # CI installs it: the rows of torch are tested there
    report = run(solved, "13", "64,512")
    impls = [(row.impl, row.size) for row in report.rows]
    sizes = ["B=1 H=4 T=64 K=64", "B=1 H=4 T=512 K=64"]
    expected = (YOURS, REFERENCE, FULL) + ((TORCH,) if torch is not None else ())
    assert impls == [(impl, size) for impl in expected for size in sizes]
    peaks = {(row.impl, row.size): row.peak_bytes for row in report.rows}
    assert all(peaks[(impl, size)] > 0 for impl in (YOURS, REFERENCE, FULL) for size in sizes)
    # the full matrix grows with T x S, the online softmax with T: at T = S = 512 it is far smaller
    assert peaks[(FULL, sizes[1])] > 4 * peaks[(YOURS, sizes[1])]
    assert "(T, S)-sized" not in report.advice
    screen = text_of(bench_screen(report))
    assert "full matrix" in screen and "peak" in screen and "MB" in screen
    if torch is not None:
        assert report.torch_version == torch.__version__ and f"torch {torch.__version__}" in screen
        assert [row.function for row in report.rows if row.impl == TORCH] == ["torch F.sdpa"] * 2
        assert all(peaks[(TORCH, size)] is None for size in sizes)


def test_json_is_one_object_with_the_fields_of_every_row(solved, tmp_path, monkeypatch):
    without_torch(monkeypatch)
    folder = tmp_path / "workspace"
    shutil.copytree(solved, folder)
    recorded = state.load(folder / ".course" / "state.json")
    recorded.lesson("l09_kv_cache").status = "passed"
    state.save(recorded, folder / ".course" / "state.json")
    done = invoke("9", "--sizes", "16", "--json", "--workspace", str(folder))
    assert done.exit_code == 0, done.output
    payload = json.loads(done.output)
    assert set(payload) == {"lesson", "matmul_gflops", "torch", "rows", "advice"}
    assert payload["lesson"] == "09" and payload["torch"] is None and payload["advice"]
    assert len(payload["rows"]) == 6  # yours and the reference: S=16, then the heads probe
    for row in payload["rows"]:
        fields = "lesson function size impl ms best_ms gflops peak_bytes probe dims"
        assert set(row) == set(fields.split())
        assert row["function"] == "decode_step" and row["impl"] in (YOURS, REFERENCE)
    assert [row["dims"] for row in payload["rows"][:3]] == [
        {"B": 4, "S": 16, "D": 128, "H": 8, "G": 2},
        {"B": 4, "S": 16, "D": 128, "H": 8, "G": 2},
        {"B": 4, "S": 16, "D": 128, "H": 32, "G": 8},
    ]


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["8"], 1, "Lesson 08 has not passed yet: the bench times a passing lesson. `course check 8` first."),
        (["7"], 1, "Lesson 07 has no bench: `course bench` times lessons 6, 8, 9 and 13."),
        (["6", "--sizes", "12,x"], 2, "--sizes takes 1 to 6 comma-separated lengths from 8 to 1024"),
        (["13", "--sizes", "5000"], 2, "--sizes takes 1 to 6 comma-separated lengths from 8 to 2048"),
        (["99"], 2, "99"),
    ],
)
def test_a_lesson_it_cannot_bench_gets_one_line_and_no_traceback(solved, args, code, words):
    done = invoke(*args, "--workspace", str(solved))
    assert done.exit_code == code and done.output.startswith("Error: ")
    assert words in " ".join(done.output.split()) and "Traceback" not in done.output


def test_learner_code_that_fails_in_the_bench_is_named_in_one_message(solved, tmp_path, monkeypatch):
    without_torch(monkeypatch)
    folder = tmp_path / "workspace"
    shutil.copytree(solved, folder)
    source = (folder / "l06_multi_head.py").read_text()
    (folder / "l06_multi_head.py").write_text(
        source + "\n\ndef multi_head_attention(*args):\n    raise ValueError('no')\n"
    )
    done = invoke("6", "--sizes", "16", "--workspace", str(folder))
    assert done.exit_code == 1 and "Traceback" not in done.output
    assert "multi_head_attention (yours) failed in the bench at B=2 T=16 D=128 H=8" in done.output
    assert "ValueError: no" in done.output


def test_learner_code_that_overruns_the_time_limit_is_named_with_what_to_do(solved, tmp_path, monkeypatch):
    without_torch(monkeypatch)
    monkeypatch.setenv("COURSE_LIMITS", "call=0.5")
    folder = tmp_path / "workspace"
    shutil.copytree(solved, folder)
    source = (folder / "l06_multi_head.py").read_text()
    endless = "\n\ndef multi_head_attention(*args):\n    while True:\n        pass\n"
    (folder / "l06_multi_head.py").write_text(source + endless)
    done = invoke("6", "--sizes", "16", "--workspace", str(folder))
    assert done.exit_code == 1 and "Traceback" not in done.output
    assert "took longer than the bench's 0.5 s at B=2 T=16 D=128 H=8" in " ".join(done.output.split())


def test_replies_that_are_not_timings_are_refused():
    for reply in ({"seconds": []}, {"seconds": ["1"]}, {"seconds": [0.1], "peak_bytes": -1}, [0.1], None):
        with pytest.raises(bench.BenchProblem, match="malformed"):
            bench._seconds(reply)
    assert bench._seconds({"seconds": [0.1, 0.2], "peak_bytes": 7}) == ([0.1, 0.2], 7)


def rows(impl: str, times: list[float], peaks=None, probe: tuple[float, float] | None = None) -> list[Row]:
    """Rows of made-up timings (ms) at T=16, 32, ...; ``probe``: the heads probe's two times."""
    made = [
        Row("06", "f", f"T={16 * 2**i}", impl, t, t, 1.0, (peaks or [None] * 9)[i], dims={"T": 16 * 2**i})
        for i, t in enumerate(times)
    ]
    for heads, t in zip((8, 32), probe or (), strict=False):
        made.append(Row("06", "f", f"T=16 H={heads}", impl, t, t, 1.0, None, True, {"T": 16, "H": heads}))
    return made


def test_the_advice_names_a_loop_over_heads_when_more_heads_cost_the_learner_more_than_the_reference():
    reference = rows(REFERENCE, [1.0, 2.0], probe=(0.1, 0.2))
    looped = advise("multi_head_attention", rows(YOURS, [1.0, 2.0], probe=(0.3, 1.3)) + reference)
    assert looped.startswith("24 more heads at T=16 H=8 cost yours 1.00 ms more, the reference 0.10 ms")
    assert "a Python loop over heads" in looped
    slow = advise("multi_head_attention", rows(YOURS, [5.0, 10.0], probe=(0.5, 1.0)) + reference)
    assert "5.0x the reference's time" in slow and "not from a loop over heads" in slow
    even = advise("multi_head_attention", rows(YOURS, [1.1, 2.0], probe=(0.1, 0.25)) + reference)
    assert "keeps the reference's pace (1.0x its time at T=32)" in even and "fused QKV" in even
    torch = rows(TORCH, [0.2, 0.5])
    faster = advise("multi_head_attention", rows(YOURS, [1.0, 2.0]) + reference + torch)
    assert "torch is 5.0x faster at T=16" in faster


def test_the_advice_of_lesson_13_reads_the_peak_memory_against_the_full_matrix():
    full = rows(FULL, [1.0, 2.0], peaks=[100, 1000])
    reference = rows(REFERENCE, [1.0, 2.0], peaks=[10, 20])
    holds_all = advise(
        "online_softmax_attention", rows(YOURS, [1.0, 2.0], peaks=[90, 900]) + reference + full
    )
    assert "90% of the full-matrix attention's peak" in holds_all and "(T, S)-sized" in holds_all
    flat = advise("online_softmax_attention", rows(YOURS, [1.0, 2.0], peaks=[10, 20]) + reference + full)
    assert "in 2% of the full matrix's memory" in flat
