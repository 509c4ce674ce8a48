"""Property checks replayed: the examples hypothesis generates, called again without hypothesis.

Every property check runs with the grading profile's fixed seed (see ``profile`` and ``plugin``),
so it gets the same examples on every check of every learner, as long as it passes: hypothesis
decides what to generate next only from its own random draws and the statuses of earlier calls,
and a passing check's calls all pass. So the first time a property check passes in a grading
process, ``Replayer`` records the arguments hypothesis drew for each call (deep copies, taken
before the call); later grades in that process, and every process forked from it, call the test
body with those arguments directly, without hypothesis's engine.

A replay that passes every recorded example is the pass hypothesis would have given. When an
example fails, the replay is thrown away and hypothesis runs the check itself, from its first
example, exactly as without a recording: its failure, its "Falsifying example" note and its
status are the grade (a call that timed out during the replay is not held against that run).
A cold check may be handed the recordings of earlier checks kept in a file (``kept_examples``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from course.engine.testing import secret

# (test file and the grading secret's identity, check) -> examples
RECORDED: dict[tuple[str, str], list[dict[str, Any]]] = {}
COUNTS = {"recorded": 0, "replayed": 0, "handed_back": 0}  # property checks, in this process


def within_file(nodeid: str) -> str:
    """A check's name within its test file ("TestX::test_y[case]"): its node id starts with
    the file's path as seen from pytest's folder, which is the grader's own and changes."""
    return nodeid.split("::", 1)[-1]


def _file(test_file: Path | str) -> str:
    """A test file's recordings' key: its examples also depend on the grading secret in use."""
    return f"{test_file}\0{secret.identity()}"


def recorded_in(test_file: Path) -> dict[str, list[dict[str, Any]]]:
    """This process's recordings of ``test_file``'s checks (under the secret in use, if any),
    by name within the file."""
    here = _file(test_file)
    return {check: examples for (path, check), examples in RECORDED.items() if path == here}


def adopt(test_file: Path, checks: dict[str, list[dict[str, Any]]]) -> None:
    """Take recordings of ``test_file``'s checks made elsewhere (see ``kept_examples``); a
    check already recorded here keeps its own."""
    for check, examples in checks.items():
        RECORDED.setdefault((_file(test_file), check), examples)


class Replayer:
    """A pytest plugin, registered beside the grading plugin by the runner."""

    def __init__(self, learner: Any) -> None:
        self.learner = learner

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        handle = getattr(pyfuncitem.obj, "hypothesis", None)
        if handle is None or not getattr(pyfuncitem.obj, "is_hypothesis_test", False):
            return None
        fixtures = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        key = (_file(pyfuncitem.path), within_file(pyfuncitem.nodeid))
        examples = RECORDED.get(key)
        if examples is not None:
            if self._replay(pyfuncitem, handle.inner_test, fixtures, examples):
                COUNTS["replayed"] += 1
                return True
            COUNTS["handed_back"] += 1
            return None  # hypothesis runs it from the start and reports the failure itself
        self._record(pyfuncitem, handle, fixtures, key)
        return True

    def _replay(self, item: pytest.Function, inner: Any, fixtures: dict, examples: list[dict]) -> bool:
        bound = getattr(item.obj, "__self__", None)
        leading = (bound,) if bound is not None else ()
        # What the replay's calls mark as not to be called again (a time limit reached, the
        # worker's process ended) is forgotten if it fails: hypothesis's run meets it itself.
        marks = getattr(self.learner, "not_again", None)
        before = dict(marks) if isinstance(marks, dict) else {}
        try:
            for example in examples:
                inner(*leading, **fixtures, **copy.deepcopy(example))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # noqa: BLE001 - any failure: hypothesis decides instead
            if isinstance(marks, dict):
                marks.clear()
                marks.update(before)
            return False
        return True

    @staticmethod
    def _record(item: pytest.Function, handle: Any, fixtures: dict, key: tuple[str, str]) -> None:
        """Run the check through hypothesis (as pytest would), noting what each call was given;
        keep the notes only if it passed."""
        seen: list[dict[str, Any]] = []
        original = handle.inner_test
        recordable = [True]

        bound = getattr(item.obj, "__self__", None)

        def recorder(*args: Any, **kwargs: Any) -> Any:
            # hypothesis passes everything by name, the test's instance too ("self")
            drawn = {
                name: value
                for name, value in kwargs.items()
                if name not in fixtures and not (bound is not None and value is bound)
            }
            try:
                seen.append(copy.deepcopy(drawn))
            except Exception:  # noqa: BLE001 - an argument that cannot be copied: no recording
                recordable[0] = False
            if len(args) > (1 if bound is not None and args[:1] == (bound,) else 0):
                recordable[0] = False  # drawn positionally: not replayable by name
            return original(*args, **kwargs)

        handle.inner_test = recorder
        try:
            item.obj(**fixtures)
        finally:
            handle.inner_test = original
        if recordable[0] and key not in RECORDED:
            RECORDED[key] = seen
            COUNTS["recorded"] += 1
