"""What `course next`, `course check` and `course list` do, typer-free: ``course.cli.quick``
runs these straight from the command line, and the typer commands of the same names
(``course.cli.learner``, which declare their options and help) call them too.

Each imports what it uses when it runs: `course list` never loads the grading path, and a
check loads the rendering of attention maps (numpy) only when there is a picture to draw.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from course.cli.common import fail, lesson_or_current, open_session, print_json, show, use_secret

if TYPE_CHECKING:
    from course.workspace import prefetch


def next_(workspace: str | None = None, fresh: bool = False) -> None:
    """Check the current lesson; when it passes, move on to the next one."""
    from course.render import screens
    from course.workspace import actions

    session = open_session(workspace, create=True)
    show(screens.next_screen(actions.next_step(session, fresh), session))


def check(
    lesson: str | None = None,
    all_: bool = False,
    as_json: bool = False,
    verbose: bool = False,
    debug: bool = False,
    workspace: str | None = None,
    fresh: bool = False,
    sealed: bool = False,
) -> None:
    """Grade a lesson (default: the current one), or every one (``all_``). Exits 0 when it
    passed, 1 when not. ``sealed``: as ``course grade`` does (GitHub Classroom's command).
    With ``$COURSE_GRADING_SECRET`` set, every input derives from it (``use_secret``)."""
    if debug and (all_ or as_json or sealed):
        fail(
            "--debug runs one lesson's tests in this process and shows pytest's own report: "
            "it takes no --all, --json or --sealed. Name the lesson: `course check 3 --debug`."
        )
    use_secret(None)
    started = None if debug or sealed else _start_early(lesson, all_, workspace, fresh)
    from course.workspace import actions

    session = open_session(workspace)
    if debug:
        code = actions.debug_check(session, lesson_or_current(session, lesson))
        raise SystemExit(0 if code == 0 else 1)
    lessons = session.catalog.available() if all_ else (lesson_or_current(session, lesson),)
    # The screen's code loads while the warm grader works (it is not needed for JSON).
    prepare = None if as_json else _load_screens
    graded = actions.check_many(session, lessons, fresh, prepare, started, sealed)
    results = list(zip(lessons, graded, strict=True))
    passed = all(result.passed for _, result in results)
    if as_json:
        payloads = [result.to_dict() for _, result in results]
        print_json({"lessons": payloads, "status": "passed" if passed else "failed"} if all_ else payloads[0])
    else:
        from course.render import screens
        from course.render.basics import notices

        show(
            notices(session),
            *[screens.result_screen(e, r, session, verbose=verbose) for e, r in results],
            *([screens.all_summary([r for _, r in results])] if all_ else []),
        )
        found = actions.explaining_picture(session, *results[0]) if len(results) == 1 else None
        if found is not None:
            from course.render import pictures  # imports numpy: only when there is a picture

            show(pictures.diagnosis(found))
    raise SystemExit(0 if passed else 1)


def _start_early(
    lesson: str | None, all_: bool, workspace: str | None, fresh: bool
) -> prefetch.Started | None:
    """The grading of the named lesson (or of every one) started before the rest of the
    command loads (``course.workspace.prefetch``); None when the workspace or the lesson is not known
    yet: the usual path then finds them, or says why it cannot."""
    if lesson is None and not all_:
        return None  # the current lesson: known from the progress state
    from course.content.catalog import load_catalog
    from course.workspace import folder, prefetch

    try:
        found = folder.find(workspace)
        catalog = load_catalog()
        chosen = catalog.available() if all_ else (catalog.resolve_available(str(lesson)),)
    except (folder.WorkspaceProblem, LookupError, OSError):
        return None
    return prefetch.start(chosen, found.root, fresh) if found is not None else None


def _load_screens() -> None:
    import course.render.screens  # noqa: F401 - loaded now, used after the answer


def list_(workspace: str | None = None, as_json: bool = False) -> None:
    """List every lesson with the learner's progress (``as_json``: as one JSON object)."""
    session = open_session(workspace)
    if as_json:
        from course.workspace import overview

        print_json(overview.progress(session))
        return
    from course.render.lessons import lesson_list

    show(lesson_list(session))
