"""Capture the course's main screens as plain text and SVG, for the README and for reviewing
how they read: `course list`, `course next` (a new lesson), `course check` (a classic
mistake), `course show N --map` of every lesson whose pictures draw figures (its measured
results), `course bench 6` and every lesson's `course experiment N NAME` (minutes: the
experiments train models), on solved lessons.
Screens are built from the same workspace actions and render functions the commands use, on a
throw-away workspace, 80 columns wide.

    python tools/capture_screens.py [OUT_DIR]     (default: docs/screens)
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
import tomllib
from pathlib import Path

from rich.console import Console, Group

from course.bench.run import run_bench
from course.content.catalog import load_catalog
from course.engine.pictures.load import load as load_pictures
from course.render import bench as render_bench
from course.render import experiments as render_experiments
from course.render import pictures as render_pictures
from course.render import screens
from course.render.lessons import lesson_list
from course.workspace import actions, state
from course.workspace import folder as ws
from course.workspace.session import Session, open_session

REPO = Path(__file__).resolve().parent.parent


def mistaken(module: str, name: str) -> str:
    """The solution of ``module`` with the classic mistake ``name`` of tests/mistakes applied."""
    source = (REPO / "solutions" / f"{module}.py").read_text()
    with open(REPO / "tests" / "mistakes" / f"{module}.toml", "rb") as handle:
        mistake = next(m for m in tomllib.load(handle)["mistake"] if m["name"] == name)
    for edit in mistake["edit"]:
        source = source.replace(edit["old"], edit["new"])
    return source


def save(name: str, renderable, out: Path) -> None:
    console = Console(
        record=True, width=80, force_terminal=True, color_system="truecolor", file=io.StringIO()
    )
    console.print(renderable)
    (out / f"{name}.txt").write_text(console.export_text(styles=False, clear=False))
    (out / f"{name}.svg").write_text(console.export_svg(title=f"course {name.replace('_', ' ')}"))
    print(f"wrote {out / name}.txt and .svg")


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    os.environ["COURSE_SERVER"] = "off"
    catalog = load_catalog()
    folder = Path(tempfile.mkdtemp(prefix="course-screens-")) / "workspace"
    workspace, added = ws.init(folder, catalog)
    state.save(state.State(welcomed=True, placed=[p.stem for p in added]), workspace.state_path)
    os.chdir(folder.parent)
    for lesson in catalog.lessons[:2]:
        (folder / lesson.file_name).write_text((REPO / "solutions" / lesson.file_name).read_text())
    (folder / "l03_attention.py").write_text(mistaken("l03_attention", "mask_minus_1e9"))
    session = open_session(str(folder))
    for lesson in catalog.lessons[:2]:
        actions.check(session, lesson)
    third = catalog.resolve("3")
    save("check", screens.result_screen(third, actions.check(session, third), session), out)
    save("list", lesson_list(session), out)
    (folder / "l03_attention.py").write_text((REPO / "solutions" / "l03_attention.py").read_text())
    save("next", screens.next_screen(actions.next_step(session), session), out)
    for lesson in catalog.available():
        (folder / lesson.file_name).write_text((REPO / "solutions" / lesson.file_name).read_text())
    for lesson in catalog.available():
        drawn = load_pictures(lesson)
        if drawn is not None and callable(getattr(drawn, "figures", None)):  # results to show
            save(
                f"show_{lesson.id}", render_pictures.maps_screen(actions.attention_maps(session, lesson)), out
            )
    capture_bench(session, out)
    capture_experiments(session, out)
    return 0


def capture_experiments(session: Session, out: Path) -> None:
    """`course experiment N NAME` of every experiment, on the solved lessons: the heading and the
    figures (the progress bar is left out; it reports to nothing here)."""
    for lesson in session.catalog.available():
        for experiment in actions.experiments(lesson):
            found, problem = actions.run_experiment(session, lesson, experiment.name, lambda *_: None)
            if problem:
                raise SystemExit(f"course experiment {lesson.id} {experiment.name}: {problem}")
            screen = Group(
                render_experiments.experiment_header(experiment), render_experiments.experiment_figures(found)
            )
            save(f"experiment_{lesson.id}_{experiment.name}", screen, out)


def capture_bench(session: Session, out: Path) -> None:
    """`course bench 6` on the solved lesson 6 (its numbers are this machine's, this run's)."""
    sixth = session.catalog.resolve("6")
    if actions.check(session, sixth).passed:
        save("bench_6", render_bench.bench_screen(run_bench(session, sixth)), out)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "screens"))
