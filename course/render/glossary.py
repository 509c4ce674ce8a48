"""Rich renderables for `course glossary [TERM]` and `course faq`. Nothing here prints.

Glossary text is course data, shown as plain Text (never markup); each entry says where the
learner computes or measures it, and each number the expression that computes it.
"""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from course.content.catalog import Catalog
from course.content.glossary import Answer, Entry, Glossary, Term


def _places(entry: Entry, catalog: Catalog) -> list[str]:
    """``lesson 06 (Multi-head attention): multi_head_attention`` for each place, course order."""
    titles = {lesson.id: lesson.title for lesson in catalog.lessons}
    return [
        f"lesson {place.lesson} ({titles.get(place.lesson, 'not in this course')}): {place.function}"
        for place in sorted(entry.lessons, key=lambda place: place.lesson)
    ]


def _numbers(entry: Entry) -> list[str]:
    return [
        f"{number.value:,} = {number.expression} (lesson {number.lesson})"
        if isinstance(number.value, int)
        else f"{number.value!r} = {number.expression} (lesson {number.lesson})"
        for number in entry.numbers
    ]


def _details(entry: Entry, catalog: Catalog) -> list[RenderableType]:
    """Where it is computed, its numbers and its sources, one labelled block each."""
    parts: list[RenderableType] = []
    for label, lines in (
        ("Where you compute it", _places(entry, catalog)),
        ("Its numbers, with your own functions", _numbers(entry)),
        ("Sources", list(entry.sources)),
    ):
        if lines:
            bullets = Table.grid(padding=(0, 1))
            bullets.add_column(no_wrap=True)
            bullets.add_column()
            for line in lines:
                bullets.add_row("  •", Text(line, style="dim" if label == "Sources" else ""))
            parts += [Text(label, style="bold"), bullets]
    return parts


def term_list(glossary: Glossary, catalog: Catalog) -> RenderableType:
    """Every term, what else it is called, and the lessons where the learner meets it."""
    table = Table(title="Glossary", box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("term", no_wrap=True)
    table.add_column("also called")
    table.add_column("lessons", no_wrap=True)
    for term in sorted(glossary.terms, key=lambda term: term.name.lower()):
        lessons = sorted({place.lesson for place in term.lessons})
        table.add_row(Text(term.name, style="bold"), Text(", ".join(term.aliases)), ", ".join(lessons))
    footer = Text(
        "`course glossary TERM` shows a term (its definition, numbers and sources); "
        "`course faq` answers the common questions.",
        style="dim",
    )
    return Group(table, footer)


def term_screen(term: Term, catalog: Catalog) -> RenderableType:
    """One term: definition, formula and steps when it has them, where it is computed, numbers,
    related terms and sources."""
    parts: list[RenderableType] = [Text(term.definition)]
    if term.aliases:
        parts.append(Text(f"Also called: {', '.join(term.aliases)}", style="dim"))
    if term.formula:
        parts += [Text(""), Text("Formula", style="bold"), Text(f"  {term.formula}")]
    if term.steps:
        parts += [Text(""), Text("Steps", style="bold")]
        parts += [Text(f"  {number}. {step}") for number, step in enumerate(term.steps, 1)]
    parts += [Text(""), *_details(term, catalog)]
    if term.related:
        parts.append(Text.assemble(("Related: ", "bold"), ", ".join(term.related)))
    return Panel(Group(*parts), title=escape(term.name), title_align="left", border_style="cyan")


def faq_screen(glossary: Glossary, catalog: Catalog) -> RenderableType:
    """Every question with its answer, numbers, lessons and sources."""
    return Group(*[_answer(answer, catalog) for answer in glossary.faq])


def _answer(answer: Answer, catalog: Catalog) -> RenderableType:
    body = Group(Text(answer.answer), Text(""), *_details(answer, catalog))
    return Panel(body, title=escape(answer.question), title_align="left", border_style="cyan")


def lesson_terms(terms: list[Term]) -> RenderableType:
    """The line a lesson's screen adds: the glossary terms the lesson computes or measures."""
    if not terms:
        return Text("")
    names = ", ".join(term.name for term in terms)
    return Text.assemble(("Glossary: ", "bold"), names, (" · `course glossary TERM` explains one", "dim"))
