"""A lesson's source is written once: the solution file. The skeleton is generated from it.

A solution file holds, in this order, the lesson text (its module docstring), a header (imports
and constants) and functions. The functions the learner writes keep the learner's docstring,
numbered TODO steps included, and their body is a solution region, nbgrader's source format:

    def softmax(x, axis=-1):
        \"\"\"... TODO: 1. ... \"\"\"
        ### BEGIN SOLUTION
        # Why the code is written this way, as comments.
        ...
        ### END SOLUTION

Helper functions the learner does not write have no region and appear in both files. The
skeleton (``skeleton``, written by `course dev skeletons`, checked by `course dev check`) is the
solution with every region replaced by ``raise NotImplementedError`` at the region's indentation
and one closing line added to the lesson text, made from the catalog: "Edit this file, then run
`course check N`." The notebooks split the same source with ``parse``; the learner's `course
solution` shows it without the marker lines (``without_markers``). Sources are read with ``ast``
and ``tokenize``, never imported.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass

from course.content.catalog import Lesson

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STUB = "raise NotImplementedError"


class LessonSourceError(ValueError):
    """The solution source cannot be split; the message names the line and says what to fix."""


@dataclass(frozen=True)
class Region:
    begin: int  # 0-based index of the ``### BEGIN SOLUTION`` line
    end: int  # 0-based index of the ``### END SOLUTION`` line
    indent: str


@dataclass(frozen=True)
class Function:
    name: str
    solution: str  # decorators, def, docstring and body, solution regions marked
    skeleton: str  # the same, every region replaced by the stub
    regions: int  # how many solution regions the function holds


@dataclass(frozen=True)
class LessonSource:
    text: str  # the module docstring, cleaned: the lesson text without the skeleton's last line
    header: str  # everything between the docstring and the first function (imports, constants)
    functions: tuple[Function, ...]

    def function(self, name: str) -> Function | None:
        return next((f for f in self.functions if f.name == name), None)


def edit_line(lesson: Lesson) -> str:
    """The last line of every skeleton's lesson text."""
    return f"Edit this file, then run `course check {lesson.number}`."


def regions(source: str, filename: str = "<solution>") -> list[Region]:
    """The solution regions of a source: marker comments alone on their line, paired in order."""
    lines = source.splitlines()
    found: list[Region] = []
    begin: tuple[int, str] | None = None
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError) as error:
        raise LessonSourceError(f"{filename} cannot be read: {error}.") from None
    for token in tokens:
        marker = token.string.strip()
        if token.type != tokenize.COMMENT or marker not in (BEGIN, END):
            continue
        index = token.start[0] - 1
        indent = lines[index][: token.start[1]]
        where = f"{filename}, line {index + 1}"
        if indent.strip():
            raise LessonSourceError(f"{where}: {marker!r} must stand alone on its line.")
        if marker == BEGIN:
            if begin is not None:
                raise LessonSourceError(f"{where}: a solution region begins inside another one.")
            begin = (index, indent)
        elif begin is None:
            raise LessonSourceError(f"{where}: {END!r} without a {BEGIN!r} before it.")
        elif indent != begin[1]:
            raise LessonSourceError(f"{where}: {END!r} is not indented like its {BEGIN!r}.")
        else:
            found.append(Region(begin[0], index, indent))
            begin = None
    if begin is not None:
        raise LessonSourceError(f"{filename}, line {begin[0] + 1}: this solution region never ends.")
    return found


def _stubbed(lines: list[str], found: list[Region], first: int = 0) -> list[str]:
    """``lines`` (starting at source line index ``first``) with every region in them stubbed."""
    out = list(lines)
    for region in sorted(found, key=lambda r: r.begin, reverse=True):
        begin, end = region.begin - first, region.end - first
        if 0 <= begin and end < len(lines):
            out[begin : end + 1] = [region.indent + STUB]
    return out


def _tree(source: str, filename: str) -> ast.Module:
    try:
        return ast.parse(source, filename=filename)
    except SyntaxError as error:
        raise LessonSourceError(f"{filename} cannot be parsed: {error}.") from None


def _docstring_node(tree: ast.Module, filename: str) -> ast.Expr:
    first = tree.body[0] if tree.body else None
    if (
        not isinstance(first, ast.Expr)
        or not isinstance(first.value, ast.Constant)
        or not isinstance(first.value.value, str)
    ):
        raise LessonSourceError(f"{filename} needs a module docstring (the lesson text) first.")
    return first


def parse(source: str, filename: str = "<solution>") -> LessonSource:
    """Split a solution source into lesson text, header and functions (solution and skeleton)."""
    tree = _tree(source, filename)
    doc = _docstring_node(tree, filename)
    lines = source.splitlines()
    found = regions(source, filename)
    defs = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defs:
        raise LessonSourceError(f"{filename} needs functions after its docstring and imports.")
    # A function ends at its last statement, or at the END marker of a region it holds (ast
    # leaves the trailing comment out of the function).
    spans = []
    for node in defs:
        start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        stop = node.end_lineno or node.lineno
        spans.append((start, max([stop] + [r.end + 1 for r in found if start <= r.begin < stop])))
    for region in found:
        if not any(start <= region.begin and region.end < stop for start, stop in spans):
            raise LessonSourceError(
                f"{filename}, line {region.begin + 1}: a solution region must lie inside a function."
            )
    header = "\n".join(lines[doc.end_lineno or doc.lineno : spans[0][0]]).strip() + "\n"
    functions = []
    for node, (start, stop) in zip(defs, spans, strict=True):
        inside = [r for r in found if start <= r.begin < stop]
        functions.append(
            Function(
                node.name,
                "\n".join(lines[start:stop]),
                "\n".join(_stubbed(lines[start:stop], inside, start)),
                len(inside),
            )
        )
    return LessonSource(ast.get_docstring(tree, clean=True) or "", header, tuple(functions))


def skeleton(source: str, lesson: Lesson, filename: str = "<solution>") -> str:
    """The learner's skeleton of ``lesson``, generated from its solution source.

    The module docstring must close with its ``\"\"\"`` alone on the last line; the lesson text
    gets ``edit_line(lesson)`` as its last paragraph.
    """
    tree = _tree(source, filename)
    doc = _docstring_node(tree, filename)
    lines = source.splitlines()
    closing = (doc.end_lineno or doc.lineno) - 1
    if closing == doc.lineno - 1 or lines[closing].strip() not in ('"""', "'''"):
        raise LessonSourceError(
            f"{filename}, line {closing + 1}: end the module docstring with its closing quotes alone "
            "on a line, so that the skeleton's last line of lesson text can go before them."
        )
    out = _stubbed(lines, regions(source, filename))
    out[closing:closing] = ["", edit_line(lesson)]
    return "\n".join(out) + "\n"


def without_markers(source: str) -> str:
    """The solution as a learner reads it: the region marker lines left out, all else kept."""
    try:
        found = regions(source)
    except LessonSourceError:
        return source
    markers = {index for region in found for index in (region.begin, region.end)}
    kept = [line for index, line in enumerate(source.splitlines(keepends=True)) if index not in markers]
    return "".join(kept)
