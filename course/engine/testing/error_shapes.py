"""A raw numpy error in the learner's code, read in the lesson's dimension letters.

"matmul: ... (size 5 is different from 6)" says nothing about attention until 5 reads as S and 6
as K. A grading test module declares the letters of its functions' arguments
(``DIMS = {"attention_scores": {"q": "B T K", "k": "B S K"}}``, the last axes when an argument may
have more); when a call fails with the learner's exception, the grader knows the shapes it
passed (``LearnerError.call``) and states them in those letters, with every size that names
exactly one letter. Nothing is read from the error's words.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

SHAPE_ERRORS = ("ValueError", "IndexError")  # what numpy raises for shapes that do not fit


def _argument_name(label: str, names: list[str]) -> str:
    """``argument 2`` -> the second parameter's name; a keyword stays itself."""
    found = re.fullmatch(r"argument (\d+)", label)
    if found and int(found.group(1)) <= len(names):
        return names[int(found.group(1)) - 1]
    return label


def in_letters(
    function: str, shapes: Mapping[str, tuple[int, ...]], dims: Mapping[str, Mapping[str, str]] | None
) -> str:
    """One or two lines: each declared argument's shape in letters, then the sizes that name one
    letter; "" when ``function`` has no declared letters or no declared argument was an array."""
    declared = dict((dims or {}).get(function, {}))
    names = list(declared)
    parts: list[str] = []
    sizes: dict[str, set[int]] = {}
    for label, shape in shapes.items():
        name = _argument_name(label, names)
        letters = declared.get(name, "").split()
        if not letters or len(letters) > len(shape):
            continue
        tail = shape[len(shape) - len(letters) :]
        lead = ["…"] if len(shape) > len(letters) else []
        parts.append(f"{name} ({', '.join(lead + letters)}) = {tuple(shape)}")
        for letter, size in zip(letters, tail, strict=True):
            sizes.setdefault(letter, set()).add(size)
    if not parts:
        return ""
    by_size: dict[int, set[str]] = {}
    for letter, found in sizes.items():
        for size in found:
            by_size.setdefault(size, set()).add(letter)
    named = [
        f"{letter} = {size}"
        for letter, found in sizes.items()
        for size in sorted(found)
        if len(found) == 1 and len(by_size[size]) == 1
    ]
    text = f"This call gave {function}: " + ", ".join(parts) + "."
    if named:
        text += f"\nRead the sizes in the error with these letters: {', '.join(named)}."
    return text
