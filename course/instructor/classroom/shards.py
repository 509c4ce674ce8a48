"""A class split across machines: which submissions a shard grades, and one gradebook made of the
shards' reports.

`course grade DIR --shard K/N` grades the submissions whose file name (a student's folder name
for nbgrader's layout) hashes into shard K of N: a stable hash of the name alone, so a late
submission moves no one else, and any engine that runs N copies of a command (a GitHub Actions
matrix, a Kubernetes indexed Job, a Slurm array) can split a class. `course gradebook merge`
reads the shards' JSON reports, which carry each row's fingerprints, refuses shards that were
not graded alike (another course version, lesson set, secret or shard count), and flags
similarity across all of them as one run would.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from course.content.catalog import Catalog


class ShardError(ValueError):
    """A shard or a set of reports that cannot be used; its message is for people."""


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1 to ``count``) of a class split in ``count``."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"K/N"``, with 1 <= K <= N."""
        parts = text.split("/")
        if len(parts) != 2 or not all(part.strip().isdigit() for part in parts):
            raise ShardError(f"--shard takes K/N (shard K of N, e.g. 2/3), not {text!r}")
        index, count = int(parts[0]), int(parts[1])
        if not 1 <= index <= count:
            raise ShardError(f"--shard {text}: K runs from 1 to N")
        return cls(index, count)

    def holds(self, name: str) -> bool:
        """Whether the submission named ``name`` (its file or folder name) is in this shard."""
        digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def load_reports(paths: Sequence[Path]) -> list[dict]:
    """The JSON reports at ``paths``, each checked to be one `course grade --json` wrote."""
    reports = []
    for path in paths:
        try:
            report = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as problem:
            raise ShardError(f"{path} is not a readable JSON report ({problem})") from None
        if not (
            isinstance(report, dict)
            and isinstance(report.get("submissions"), list)
            and isinstance(report.get("max_points"), dict)
            and all(
                isinstance(row, dict) and isinstance(row.get("file"), str) for row in report["submissions"]
            )
        ):
            raise ShardError(
                f"{path} is not a report of `course grade --json` (no submissions and max_points)"
            )
        report["_path"] = str(path)
        reports.append(report)
    if not reports:
        raise ShardError("name the JSON reports of the shards to merge")
    return reports


def check_alike(reports: Sequence[dict]) -> None:
    """Refuse reports not graded alike, or that do not make one whole class: each names the
    same course version, lessons (with their maxima), inputs (public or one secret) and shard
    count; every shard is there once; no submission is in two of them."""
    first = reports[0]
    for report in reports[1:]:
        for key, what in (
            ("course_version", "course version"),
            ("max_points", "lessons"),
            ("inputs", "inputs (public or an instructor's secret)"),
        ):
            if report.get(key) != first.get(key):
                raise ShardError(
                    f"{report['_path']} and {first['_path']} were graded with other {what}: "
                    f"{report.get(key)!r} and {first.get(key)!r}; merge shards of one grading only"
                )
    shards = [report.get("shard") or "" for report in reports]
    if any(shards):
        counts = {shard.split("/")[-1] for shard in shards}
        if "" in shards or len(counts) != 1:
            raise ShardError(
                f"these reports split the class differently: shards {', '.join(map(repr, shards))}"
            )
        count = int(counts.pop())
        missing = [f"{k}/{count}" for k in range(1, count + 1) if f"{k}/{count}" not in shards]
        if missing or len(shards) != count:
            twice = sorted({shard for shard in shards if shards.count(shard) > 1})
            raise ShardError(
                "the shards do not make one class: "
                + (f"missing {', '.join(missing)}" if missing else f"{', '.join(twice)} given twice")
            )
    seen: dict[str, str] = {}
    for report in reports:
        for row in report["submissions"]:
            if row["file"] in seen:
                raise ShardError(f"{row['file']} is in {seen[row['file']]} and in {report['_path']}")
            seen[row["file"]] = report["_path"]


def lessons_of(report: dict, catalog: Catalog) -> list:
    """The catalog's lessons a report graded, in its order."""
    found = [catalog.by_module(module) for module in report["max_points"]]
    if any(lesson is None for lesson in found):
        raise ShardError(
            f"{report['_path']} grades lessons this course does not have: {list(report['max_points'])}"
        )
    return found
