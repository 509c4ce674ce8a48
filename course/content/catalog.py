"""The lesson catalog (``catalog.toml``) as typed, read-only data, and lesson lookup by name."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sys
from functools import lru_cache
from pathlib import Path

from course import atomic_file
from course.content import resources

CATALOG_FILE = Path(__file__).with_name("catalog.toml")


class Record:
    """A small read-only value, compared, hashed and shown by its fields (its ``__slots__``).

    Not a dataclass (which imports ``inspect``) nor a ``typing.NamedTuple`` (``typing``): a
    check reads the catalog before it sends the warm grader its request, and those imports
    would delay it."""

    __slots__: tuple[str, ...] = ()

    def __init__(self, *values: object) -> None:
        for name, value in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, name, value)

    def _fields(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._fields() == self._fields()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._fields()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({shown})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __reduce__(self) -> tuple:
        return type(self), self._fields()

    def _replace(self, **changes: object) -> Record:
        """A copy with the fields named changed."""
        return type(self)(*(changes.get(name, getattr(self, name)) for name in self.__slots__))


class CodeHint(Record):
    """The code a hint gives, as data: it replaces the solution region(s) of the function
    ``replaces`` in the reference solution, and `course dev check` grades the result."""

    __slots__ = ("tier", "replaces", "code")
    tier: int  # the hint (1-based) whose text it follows
    replaces: str  # the function whose solution region the code stands for
    code: str

    def __init__(self, tier: int, replaces: str, code: str) -> None:
        super().__init__(tier, replaces, code)


class Exercise(Record):
    __slots__ = ("name", "summary", "hints", "calls", "code_hints")
    name: str
    summary: str
    hints: tuple[str, ...]
    calls: tuple[str, ...]  # exercises it uses: "name" of its lesson, "<module>.<name>" of an earlier one
    code_hints: tuple[CodeHint, ...]

    def __init__(
        self,
        name: str,
        summary: str,
        hints: tuple[str, ...],
        calls: tuple[str, ...] = (),
        code_hints: tuple[CodeHint, ...] = (),
    ) -> None:
        super().__init__(name, summary, hints, calls, code_hints)

    def code_for(self, tier: int) -> CodeHint | None:
        """The code hint ``tier`` gives (1-based), if it gives one."""
        return next((code for code in self.code_hints if code.tier == tier), None)


class Lesson(Record):
    __slots__ = ("id", "module", "title", "goals", "exercises")
    id: str
    module: str
    title: str
    goals: tuple[str, ...]
    exercises: tuple[Exercise, ...]

    def __init__(
        self, id: str, module: str, title: str, goals: tuple[str, ...], exercises: tuple[Exercise, ...]
    ) -> None:
        super().__init__(id, module, title, goals, exercises)

    @property
    def number(self) -> int:
        return int(self.id)

    @property
    def short_name(self) -> str:
        """``l03_attention`` -> ``attention``."""
        return self.module.split("_", 1)[1]

    @property
    def file_name(self) -> str:
        return f"{self.module}.py"

    @property
    def skeleton(self) -> Path:
        return resources.skeleton_path(self.module)

    @property
    def solution(self) -> Path:
        return resources.solution_path(self.module)

    @property
    def reference(self) -> Path:
        """The course's own code for this lesson: its solution when the course ships one (a
        clone, a wheel), else its skeleton."""
        return self.solution if self.solution.is_file() else self.skeleton

    @property
    def grading_tests(self) -> Path:
        return resources.grading_test_path(self.module)

    @property
    def pictures(self) -> Path:
        """What the lesson wants drawn (maps, shape trace, figures); absent: no pictures."""
        return resources.pictures_path(self.module)

    @property
    def available(self) -> bool:
        """False for lessons the catalog announces but whose files are not written yet."""
        return self.skeleton.is_file() and self.grading_tests.is_file()

    def exercise(self, name: str) -> Exercise | None:
        return next((e for e in self.exercises if e.name == name), None)


class Catalog(Record):
    __slots__ = ("title", "version", "lessons")
    title: str
    version: str
    lessons: tuple[Lesson, ...]

    def __init__(self, title: str, version: str, lessons: tuple[Lesson, ...]) -> None:
        super().__init__(title, version, lessons)

    def available(self) -> tuple[Lesson, ...]:
        return tuple(lesson for lesson in self.lessons if lesson.available)

    def by_module(self, module: str) -> Lesson | None:
        return next((lesson for lesson in self.lessons if lesson.module == module), None)

    def number_of(self, module: str) -> str:
        """How a message names ``module``'s lesson in a command (`course check 7`): its number;
        the module itself when no lesson of the catalog has it."""
        lesson = self.by_module(module)
        return str(lesson.number) if lesson is not None else module

    def resolve(self, name: str) -> Lesson:
        """Find a lesson by ``3``, ``03``, ``l03``, ``l03_attention`` or ``attention``.

        Raises UnknownLesson, whose message lists what would have been accepted.
        """
        key = name.strip().lower().removesuffix(".py")
        for lesson in self.lessons:
            number = re.fullmatch(r"l?0*(\d+)", key)
            if number and int(number.group(1)) == lesson.number:
                return lesson
            if key in (lesson.module, lesson.short_name):
                return lesson
        raise UnknownLesson(name, self)

    def resolve_available(self, name: str) -> Lesson:
        """``resolve``, and the lesson's files must be written (else LessonNotReady)."""
        lesson = self.resolve(name)
        if not lesson.available:
            raise LessonNotReady(lesson)
        return lesson

    def resolve_list(self, names: str | None) -> list[Lesson]:
        """Comma-separated names ("1,2,3") as available lessons in course order; every available
        lesson for None or an empty string."""
        if not names or not names.strip():
            return list(self.available())
        chosen = {self.resolve_available(name) for name in names.split(",") if name.strip()}
        return sorted(chosen, key=lambda lesson: lesson.number)


class LessonNotReady(LookupError):
    """The catalog announces the lesson but its files are not written yet."""

    def __init__(self, lesson: Lesson) -> None:
        super().__init__(
            f"Lesson {lesson.id} ({lesson.title}) is coming soon: its files are not written yet."
        )
        self.lesson = lesson


class UnknownLesson(LookupError):
    def __init__(self, name: str, catalog: Catalog) -> None:
        first, last = catalog.lessons[0], catalog.lessons[-1]
        super().__init__(
            f"There is no lesson '{name}'. Name a lesson by its number ({first.number}-{last.number}),"
            f" its module ({first.module}) or its short name ({first.short_name}); "
            "`course list` shows them all."
        )


class CatalogError(ValueError):
    """The catalog is malformed: a required field is missing, an id or module is not valid, or a
    lesson is listed twice. The message says where, in one line."""


_ID = re.compile(r"[0-9]{2}")
_MODULE = re.compile(r"[a-z][a-z0-9]*_[a-z0-9_]+")  # importable, lower case, with a short name


def _text(table: object, key: str, where: str) -> str:
    value = table.get(key) if isinstance(table, dict) else None
    if not isinstance(value, str) or not value.strip():
        raise CatalogError(f"The catalog's {where} has no {key!r} (a non-empty string).")
    return value


def catalog_from_data(data: dict) -> Catalog:
    """The catalog from its TOML data, validated (CatalogError on the first problem)."""
    title, version = (
        _text(data.get("course"), "title", "[course]"),
        _text(data.get("course"), "version", "[course]"),
    )
    entries = data.get("lessons")
    if not isinstance(entries, list) or not entries:
        raise CatalogError("The catalog lists no [[lessons]].")
    lessons: list[Lesson] = []
    for number, entry in enumerate(entries, 1):
        where = f"lesson entry {number}"
        lesson_id, module = _text(entry, "id", where), _text(entry, "module", where)
        if not _ID.fullmatch(lesson_id):
            raise CatalogError(
                f'The catalog\'s {where} has id {lesson_id!r}: an id is two digits, like "03".'
            )
        if not _MODULE.fullmatch(module):
            raise CatalogError(
                f"The catalog's {where} has module {module!r}: a module is a lower-case Python name "
                'with a short name after its first underscore, like "l03_attention".'
            )
        for earlier in lessons:
            if module == earlier.module or int(lesson_id) == earlier.number:
                raise CatalogError(f"The catalog lists lesson {lesson_id} ({module}) twice.")
        where = f"lesson {module}"
        exercises = tuple(
            Exercise(
                name=_text(e, "name", f"exercise {index} of {where}"),
                summary=e.get("summary", ""),
                hints=tuple(e.get("hints", ())),
                calls=tuple(e.get("calls", ())),
                code_hints=_code_hints(e, f"exercise {e.get('name')!r} of {where}"),
            )
            for index, e in enumerate(entry.get("exercises", ()), 1)
        )
        lessons.append(
            Lesson(
                id=lesson_id,
                module=module,
                title=_text(entry, "title", where),
                goals=tuple(entry.get("goals", ())),
                exercises=exercises,
            )
        )
    _check_calls(lessons)
    return Catalog(title=title, version=version, lessons=tuple(lessons))


def _code_hints(entry: dict, where: str) -> tuple[CodeHint, ...]:
    """The exercise's ``[[lessons.exercises.code_hints]]``: a tier among its hints, the function
    whose solution the code replaces, and the code."""
    found = []
    for index, item in enumerate(entry.get("code_hints", ()), 1):
        tier = item.get("tier") if isinstance(item, dict) else None
        if (
            not isinstance(tier, int)
            or isinstance(tier, bool)
            or not 1 <= tier <= len(entry.get("hints", ()))
        ):
            raise CatalogError(f"The catalog's code hint {index} of {where} has no tier among its hints.")
        found.append(
            CodeHint(
                tier, _text(item, "replaces", f"code hint {index} of {where}"), _text(item, "code", where)
            )
        )
    return tuple(found)


def _check_calls(lessons: list[Lesson]) -> None:
    """Every exercise an exercise ``calls`` exists: in its own lesson, or in an earlier one."""
    for index, lesson in enumerate(lessons):
        earlier = {f"{e.module}.{x.name}" for e in lessons[:index] for x in e.exercises}
        own = {x.name for x in lesson.exercises}
        for exercise in lesson.exercises:
            for called in exercise.calls:
                if called not in own - {exercise.name} and called not in earlier:
                    raise CatalogError(
                        f"The catalog's exercise {exercise.name} of {lesson.module} calls {called!r}, "
                        "which is neither another exercise of its lesson nor one of an earlier lesson."
                    )


@lru_cache(maxsize=1)
def load_catalog(path: Path = CATALOG_FILE) -> Catalog:
    """Read and validate the catalog once per process (CatalogError when it is malformed)."""
    return catalog_from_data(_data(path))


def _data(path: Path) -> dict:
    """The catalog file's data. Parsing TOML (``tomllib`` imports ``typing``) would delay a
    check's request, so the data is also kept as JSON beside the bytecode
    (``__pycache__/catalog.toml.json``), with the digest of the TOML it was read from, and read
    from there while the TOML's bytes are those. The package folder is trusted as its bytecode
    is; where Python writes no bytecode, neither is this written."""
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    copy = path.parent / "__pycache__" / f"{path.name}.json"
    try:
        kept = json.loads(copy.read_bytes())
        if isinstance(kept, dict) and kept.get("digest") == digest and isinstance(kept.get("data"), dict):
            return kept["data"]
    except (OSError, ValueError):
        pass
    import tomllib

    data = tomllib.loads(raw.decode("utf-8"))
    if not sys.dont_write_bytecode:
        _keep(copy, {"digest": digest, "data": data})
    return data


def _keep(path: Path, content: dict) -> None:
    """Write ``content`` to ``path`` as JSON, atomically; failures are ignored (a read-only
    install, data JSON cannot hold: the TOML is parsed every time then)."""
    with contextlib.suppress(OSError, TypeError, ValueError):
        text = json.dumps(content)
        path.parent.mkdir(exist_ok=True)
        atomic_file.replace(path, text, mode=0o644)  # readable by all who read the package
