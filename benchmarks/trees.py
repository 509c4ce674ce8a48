"""What the benchmarks share: the course as of another commit, and its warm grader.

A ``--baseline`` tree may be older than the engine's packages: the warm grader's client was
``course.engine.server`` before it was ``course.engine.warm.client``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_CLIENT = (
    "import sys\ntry:\n    from course.engine.warm import client\n"
    "except ImportError:\n    from course.engine import server as client\n"
)


def baseline_tree(ref: str, into: Path) -> Path:
    """The course as of git ``ref``, exported (not checked out) into ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", ref], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def wait_for_warm_grader(env: dict) -> None:
    """Until the warm grader of the course ``env`` runs (PYTHONPATH: a baseline tree) answers."""
    subprocess.run([sys.executable, "-c", _CLIENT + "sys.exit(not client.ready(120))"], env=env, check=True)


def stop_warm_grader(env: dict) -> None:
    subprocess.run(
        [sys.executable, "-c", _CLIENT + "client.stop()"], env=env, capture_output=True, check=False
    )
