"""The course's glossary and FAQ (``glossary.toml``) as typed, read-only data, with term lookup.

Each term and answer names the lessons (and functions) where the learner computes or measures
it, and the numbers it cites with the expression that computes them; `course dev check`
(``course.devcheck.glossary``) evaluates those against the reference solutions. Here
the file is only read and shaped: a malformed file raises ``GlossaryError`` in one sentence.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

GLOSSARY_FILE = Path(__file__).with_name("glossary.toml")


class GlossaryError(ValueError):
    """The glossary cannot be read or is malformed; the message says where."""


@dataclass(frozen=True)
class Place:
    """Where the learner computes or measures something: a lesson and one of its functions."""

    lesson: str  # the lesson's id, "06"
    function: str


@dataclass(frozen=True)
class Number:
    """A number the text cites, the call that computes it, and the lesson of that call."""

    value: int | float
    expression: str  # e.g. "count_parameters(512, 8)"
    lesson: str


@dataclass(frozen=True)
class Entry:
    """What a term and a FAQ answer share."""

    lessons: tuple[Place, ...]
    numbers: tuple[Number, ...]
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Term(Entry):
    name: str
    aliases: tuple[str, ...]
    definition: str
    formula: str
    steps: tuple[str, ...]
    related: tuple[str, ...]

    @property
    def text(self) -> str:
        """Everything the learner reads about the term (where its numbers must appear)."""
        return "\n".join([self.definition, self.formula, *self.steps])


@dataclass(frozen=True)
class Answer(Entry):
    question: str
    answer: str

    @property
    def text(self) -> str:
        return self.answer


@dataclass(frozen=True)
class Glossary:
    terms: tuple[Term, ...]
    faq: tuple[Answer, ...]

    def names(self) -> dict[str, Term]:
        """Every name and alias, lower case, to its term."""
        found: dict[str, Term] = {}
        for term in self.terms:
            for name in (term.name, *term.aliases):
                found.setdefault(name.lower(), term)
        return found

    def find(self, name: str) -> Term:
        """The term called ``name`` (case-insensitive, aliases too); UnknownTerm otherwise."""
        key = " ".join(name.split()).lower()
        names = self.names()
        if key in names:
            return names[key]
        close = difflib.get_close_matches(key, list(names), n=3, cutoff=0.7)
        raise UnknownTerm(name, [names[each].name for each in dict.fromkeys(close)])

    def terms_of(self, lesson_id: str) -> list[Term]:
        """The terms whose computation or measurement is in lesson ``lesson_id``."""
        return [term for term in self.terms if any(place.lesson == lesson_id for place in term.lessons)]


class UnknownTerm(LookupError):
    def __init__(self, name: str, suggestions: list[str]) -> None:
        unique = list(dict.fromkeys(suggestions))
        guess = f" Did you mean {' or '.join(repr(s) for s in unique)}?" if unique else ""
        super().__init__(f"The glossary has no term '{name}'.{guess} `course glossary` lists every term.")
        self.suggestions = unique


def _strings(table: dict, key: str, where: str, required: bool = False) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise GlossaryError(f"The glossary's {where} has a {key!r} that is not a list of strings.")
    if required and not value:
        raise GlossaryError(f"The glossary's {where} has no {key!r}.")
    return tuple(value)


def _text(table: dict, key: str, where: str, required: bool = True) -> str:
    value = table.get(key, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise GlossaryError(f"The glossary's {where} has no {key!r} (a non-empty string).")
    return value


def _entry(table: object, where: str) -> tuple[dict, Entry]:
    if not isinstance(table, dict):
        raise GlossaryError(f"The glossary's {where} is not a table.")
    places, numbers = table.get("lessons", []), table.get("numbers", [])
    if not isinstance(places, list) or not isinstance(numbers, list):
        raise GlossaryError(f"The glossary's {where} has 'lessons' or 'numbers' that is not a list.")
    try:
        entry = Entry(
            lessons=tuple(Place(str(p["lesson"]), str(p["function"])) for p in places),
            numbers=tuple(Number(n["value"], str(n["expression"]), str(n["lesson"])) for n in numbers),
            sources=_strings(table, "sources", where, required=True),
        )
    except (KeyError, TypeError) as error:
        raise GlossaryError(f"The glossary's {where} has a lesson or number without {error}.") from None
    if not all(isinstance(n.value, (int, float)) and not isinstance(n.value, bool) for n in entry.numbers):
        raise GlossaryError(f"The glossary's {where} has a number whose value is not a number.")
    return table, entry


def parse(data: dict) -> Glossary:
    """The glossary from its TOML data, its shape validated (GlossaryError on the first problem)."""
    terms, faq = data.get("terms", []), data.get("faq", [])
    if not isinstance(terms, list) or not isinstance(faq, list):
        raise GlossaryError("The glossary's [[terms]] and [[faq]] must be arrays of tables.")
    parsed_terms = []
    for index, raw in enumerate(terms, 1):
        table, entry = _entry(raw, f"term {index}")
        where = f"term {table.get('name', index)!r}"
        parsed_terms.append(
            Term(
                entry.lessons,
                entry.numbers,
                entry.sources,
                name=_text(table, "name", where),
                aliases=_strings(table, "aliases", where),
                definition=_text(table, "definition", where),
                formula=_text(table, "formula", where, required=False),
                steps=_strings(table, "steps", where),
                related=_strings(table, "related", where),
            )
        )
    answers = []
    for index, raw in enumerate(faq, 1):
        table, entry = _entry(raw, f"question {index}")
        answers.append(
            Answer(
                entry.lessons,
                entry.numbers,
                entry.sources,
                question=_text(table, "question", f"question {index}"),
                answer=_text(table, "answer", f"question {index}"),
            )
        )
    return Glossary(tuple(parsed_terms), tuple(answers))


@lru_cache(maxsize=4)
def load_glossary(path: Path = GLOSSARY_FILE) -> Glossary:
    """Read and validate the glossary once per process (GlossaryError when it cannot be used)."""
    try:
        with open(path, "rb") as handle:
            return parse(tomllib.load(handle))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise GlossaryError(f"The glossary cannot be read ({type(error).__name__}: {error}).") from None
