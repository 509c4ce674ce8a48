"""The grading tests are checked against a manifest of hashes before every check.

``course/content/grading_manifest.json`` holds the sha256 of every file of the grading folder, and
``course/content/grading_pristine.zip`` their original bytes; both are written by
``tools/update_grading_manifest.py`` (the project's tests fail while they are out of date). When
a file on this machine differs, the check says so and grades with the pristine copy instead, so
an edited test cannot turn a failure into a pass.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from course.content import resources

MANIFEST = resources.CONTENT_DIR / "grading_manifest.json"
PRISTINE = MANIFEST.with_name("grading_pristine.zip")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def grading_files(folder: Path) -> dict[str, Path]:
    """The files that make up the grading tests: test modules and their fixtures."""
    return {
        str(p.relative_to(folder)): p
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.suffix in (".py", ".npz") and "__pycache__" not in p.parts
    }


@dataclass
class TrustedTests:
    """The test file to run, a folder to remove afterwards, and what was found modified."""

    test_file: Path
    modified: list[str]
    temporary: Path | None = None

    def cleanup(self) -> None:
        if self.temporary is not None:
            shutil.rmtree(self.temporary, ignore_errors=True)


def trusted(test_file: Path) -> TrustedTests:
    """``test_file`` itself when every grading file matches the manifest, else the pristine copy
    of the whole grading folder unpacked into a temporary folder."""
    try:
        expected = json.loads(MANIFEST.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return TrustedTests(test_file, [])  # no manifest: a maintainer's tree without one yet
    folder = resources.data_dir("grading")
    present = grading_files(folder)
    modified = sorted(
        name for name, sha in expected.items() if name not in present or digest(present[name]) != sha
    )
    modified += sorted(name for name in present if name not in expected)
    if not modified or not PRISTINE.is_file():
        return TrustedTests(test_file, modified)
    temporary = Path(tempfile.mkdtemp(prefix="course-pristine-"))
    with zipfile.ZipFile(PRISTINE) as archive:
        for name in expected:
            target = (temporary / name).resolve()
            if temporary.resolve() in target.parents:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(name))
    return TrustedTests(temporary / test_file.name, modified, temporary)


def write_manifest() -> list[str]:
    """Record the current grading folder as pristine (maintainers only); returns its files."""
    files = grading_files(resources.data_dir("grading"))
    MANIFEST.write_text(
        json.dumps({name: digest(path) for name, path in files.items()}, indent=1, sort_keys=True) + "\n",
        encoding="utf-8",
    )
    with zipfile.ZipFile(PRISTINE, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, path in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # reproducible bytes
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return list(files)
