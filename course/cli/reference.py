"""`course glossary [TERM]` and `course faq`: the course's own glossary (course/content/glossary.toml).

They need no workspace: the glossary is course data. A term is found case-insensitively, by
its name or an alias; a typo gets the closest names suggested.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from course.cli.common import fail, show

if TYPE_CHECKING:
    from course.content.glossary import Glossary, Term


def _glossary() -> Glossary:
    from course.content.glossary import GlossaryError, load_glossary

    try:
        return load_glossary()
    except GlossaryError as problem:
        fail(f"{problem} Reinstalling the course restores it.", 1)


def terms_of(lesson_id: str) -> list[Term]:
    """The glossary terms computed or measured in a lesson; none when the glossary is unusable
    (a lesson's screen never fails for it)."""
    from course.content.glossary import GlossaryError, load_glossary

    try:
        return load_glossary().terms_of(lesson_id)
    except GlossaryError:
        return []


def glossary(
    term: Annotated[str | None, typer.Argument(help="A term or alias, e.g. GQA. Default: list them.")] = None,
) -> None:
    """The course's glossary: every term, or one term with its numbers, lessons and sources."""
    from course.content.catalog import load_catalog
    from course.render.glossary import term_list, term_screen

    found = _glossary()
    if term is None:
        show(term_list(found, load_catalog()))
        return
    try:
        chosen = found.find(term)
    except LookupError as problem:
        fail(str(problem))
    show(term_screen(chosen, load_catalog()))


def faq() -> None:
    """Common questions about multi-head attention, answered with numbers you compute."""
    from course.content.catalog import load_catalog
    from course.render.glossary import faq_screen

    show(faq_screen(_glossary(), load_catalog()))


def register(app: typer.Typer) -> None:
    app.command()(glossary)
    app.command()(faq)
