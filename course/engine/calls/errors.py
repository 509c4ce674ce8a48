"""The exceptions a learner's code causes in a call, and how the worker's description of an
error becomes one of them, in the learner's own terms.

The worker describes what went wrong on its side as plain data (the exception's type, message
and frames; see ``replies.check_reply`` for what is accepted); ``problem_for`` turns that into
the exception the grading test sees, and the reporting plugin turns the exception into a status.
"""

from __future__ import annotations

from course.engine.calls import upstream


class LearnerProblem(Exception):
    """Base of everything that went wrong on the learner's side of a call."""


class NotStarted(LearnerProblem):
    """The learner's function still raises NotImplementedError."""


class DependencyNotReady(LearnerProblem):
    """The function called an earlier lesson's function that is not implemented yet."""

    def __init__(self, message: str, module: str) -> None:
        super().__init__(message)
        self.module = module


class LearnerError(LearnerProblem):
    """The learner's code raised, returned something unusable, or broke the worker.

    ``kind`` and ``text`` are the learner's exception type and message when there was one.
    """

    def __init__(self, message: str, info: dict | None = None) -> None:
        super().__init__(message)
        self.kind = str((info or {}).get("type", ""))
        self.text = str((info or {}).get("message", ""))
        self.frames: list[dict] = list((info or {}).get("frames", []))
        self.upstream: upstream.Upstream | None = None  # raised in an earlier lesson's file
        self.call: tuple[str, dict[str, tuple[int, ...]]] | None = None  # function, argument shapes


class SignatureMismatch(LearnerError):
    """The learner's ``function`` does not accept the arguments of the call (kind
    "SignatureMismatch"); ``signature`` is the learner's own, as the worker read it."""

    def __init__(self, message: str, info: dict, function: str) -> None:
        super().__init__(message, info)
        self.function = function
        self.signature = str(info.get("signature", ""))


class LearnerTimeout(LearnerProblem):
    """A call or the import took longer than its limit."""


class ImportFailed(LearnerProblem):
    """The learner's module could not be imported; ``info`` is the worker's description."""

    def __init__(self, message: str, info: dict) -> None:
        super().__init__(message)
        self.info = info


def format_learner_error(info: dict) -> str:
    """The learner's exception in their own terms: their frames, then the exception line."""
    if info.get("type") == "MissingFunction":
        return f"There is no function named `{info.get('message')}` in your file (was it renamed?)."
    if info.get("type") in ("NotAFunction", "OutputLimit", "Unconfined"):
        return str(info.get("message"))
    lines = []
    syntax = info.get("syntax")
    if syntax:
        lines.append(f"{syntax['file']}, line {syntax['line']}:")
        text = syntax.get("text") or ""
        lines.append(f"    {text.strip()}")
        offset = syntax.get("offset")
        if isinstance(offset, int) and offset > 0:
            indent = len(text) - len(text.lstrip())
            lines.append("    " + " " * max(offset - 1 - indent, 0) + "^")
    for frame in info.get("frames", [])[-upstream.SHOWN_FRAMES :]:
        lines.append(f"{frame['file']}, line {frame['line']}, in {frame['function']}:")
        if frame.get("code"):
            lines.append(f"    {frame['code']}")
    message = info.get("message") or ""
    kind = str(info.get("type", "Error"))
    if syntax and ("codec can't decode" in message or "Non-UTF-8" in message):
        lines.append(
            f"{kind}: the file is not valid UTF-8 ({message}). Save it as UTF-8 "
            "(your editor's encoding setting)."
        )
    elif syntax:
        lines.append(f"{kind}: {message}")
    else:  # preceded by the learner's own frames, so it reads as their exception
        lines.append(f"{kind}: {message}" if message else kind)
    return "\n".join(lines)


def problem_for(
    info: dict, function: str, module: str, lessons: list[str], memory_bytes: int
) -> LearnerProblem:
    """The exception for the worker's description ``info`` of an error raised in a call to
    ``function`` of the learner's ``module``: a stub (here or in an earlier lesson among
    ``lessons``), a signature that does not fit, running out of ``memory_bytes``, or the
    learner's own exception, with a pointer to the graded lesson's line when it was raised in
    an earlier lesson's file."""
    if info.get("type") == "NotImplementedError":
        origin = info.get("origin")
        if origin and origin != module:
            return DependencyNotReady(
                f"{function} calls {info['frames'][-1]['function']} from your {origin}.py, which "
                f"still raises NotImplementedError: finish that lesson first.",
                origin,
            )
        return NotStarted(f"{function} still raises NotImplementedError.")
    if info.get("type") == "SignatureMismatch":  # worded as the TypeError Python raises
        return SignatureMismatch(f"TypeError: {info.get('message', '')}", info, function)
    if info.get("type") == "MemoryError":
        limit = memory_bytes / 1024**3
        return LearnerError(
            f"{function} ran out of memory (the limit is {limit:g} GiB).\n" + format_learner_error(info)
        )
    found = upstream.find(info.get("frames", []), module, lessons)
    message = format_learner_error(info) + (f"\n{found.sentence(module)}" if found else "")
    error = LearnerError(message, info)
    error.upstream = found
    return error
