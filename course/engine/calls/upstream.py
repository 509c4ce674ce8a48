"""Where an error in an earlier lesson's file came from: the call in the lesson being graded.

A later lesson calls the learner's earlier functions. When one of them raises (lesson 6's wrong v
reaching lesson 3's ``weights @ v``; lesson 8's wrong width reaching lesson 5's own check of
divisibility), the traceback ends in the earlier, often correct, file. The frames say which file
each line is in, so the grader can point at the last line of the graded lesson on the way: the
call that handed the earlier function its input. Decided from the frames (data), never from the
error's words; no lesson is named here.
"""

from __future__ import annotations

from dataclasses import dataclass

SHOWN_FRAMES = 3  # the learner's last frames that errors.format_learner_error shows


@dataclass(frozen=True)
class Upstream:
    """An error raised in ``raised_in`` (an earlier lesson's module), reached through line
    ``line`` of the graded lesson's file, in ``function``, which reads ``code`` (kept only when
    the traceback shown does not hold that line already)."""

    raised_in: str
    function: str
    line: int
    code: str

    def sentence(self, module: str) -> str:
        """The pointer the learner reads under the traceback."""
        from course.content.catalog import load_catalog

        shown = f":\n    {self.code}" if self.code else "."
        number = load_catalog().number_of(self.raised_in)
        return (
            f"This error is raised in your {self.raised_in}.py, called from line {self.line} of "
            f"{module}.py (in {self.function}){shown}\nIf {self.raised_in}.py passes its own checks "
            f"(`course check {number}`), the bug is in what that line passes to it: "
            "compare the shapes of its arguments with what the function expects."
        )


def find(frames: list[dict], module: str, lessons: list[str]) -> Upstream | None:
    """The graded lesson's last frame, when the error was raised further in, in another lesson
    module (``lessons``); else None. ``frames`` are the worker's, outermost first."""
    if not frames:
        return None
    raised_in = str(frames[-1].get("file", "")).removesuffix(".py")
    if raised_in == module or raised_in not in lessons:
        return None
    own = [i for i, frame in enumerate(frames) if frame.get("file") == f"{module}.py"]
    if not own:
        return None
    last = frames[own[-1]]
    code = "" if own[-1] >= len(frames) - SHOWN_FRAMES else str(last.get("code", ""))
    return Upstream(raised_in, str(last.get("function", "")), int(last.get("line", 0)), code)


def passed_note(raised_in: str, module: str, line: int) -> str:
    """Said once the earlier lesson is known to pass its own checks (the learner's progress)."""
    return (
        f"{raised_in}.py does pass its own checks (your last check of it), so the bug is on "
        f"line {line} of {module}.py."
    )
