"""Run the documentation's commands as typed: every `console` block of README.md and docs/*.md,
in document order, in a fresh copy of the repository per document, asserting each command's exit
code and each line of the `text` block right after it.

    python tools/docs_check.py [DOCUMENT...] [--keep]

The conventions the documents follow (tests/test_docs.py holds them):
- every fenced block is labelled; a `console` block holds only commands, each line starting with
  `$ ` (a line ending with a backslash continues on the next);
- a command expected to exit with another code than 0 ends with the comment `# exit N`;
- the `text` block right after a `console` block is what its commands print: each of its lines
  that holds no time and no absolute path must appear in their output (spaces and line breaks as
  rich wraps them aside, and progress counters such as "[3/4] ", since work finishes in any
  order);
- `<!-- docs-check: skip: REASON -->` right before a block skips it (REASON is printed).

Commands run with bash, one after another, each from the folder the previous one ended in;
`course` is the one installed with this interpreter, `NO_COLOR=1`, `COLUMNS=80`, no warm grader.
Exits 1 when a command exits otherwise than documented or an expected line is missing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCUMENTS = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^( {0,4})(`{3,}|~{3,})(.*)$")  # a fence, indented in a list item or not
SKIP = re.compile(r"<!--\s*docs-check:\s*skip:\s*(.+?)\s*-->")
EXIT = re.compile(r"#\s*exit\s+(\d+)\s*$")
TIME = re.compile(r"\d(?:\.\d+)?\s?(?:s|ms|min)\b|\d+:\d\d|\d{4}-\d\d-\d\d|per s\b")
ABSOLUTE_PATH = re.compile(r"(?:^|[\s'\"(=])(?:/[\w.+-]+){2,}|~/")
PROGRESS = re.compile(r"\[\d+/\d+\] ")  # "[3/4] ": lines that come in the order work finishes
TIMEOUT = 900  # seconds one command may take (the README's start command installs the course)


@dataclass
class Block:
    """A fenced block: its label (the info string's first word), its lines, where it starts,
    and the reason it is skipped ("" when it is not)."""

    label: str
    lines: list[str]
    line: int
    skip: str = ""
    expected: list[str] = field(default_factory=list)  # a console block's following text block


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown document, each console block with the text block that
    follows it (only blank lines between)."""
    found: list[Block] = []
    lines = text.splitlines()
    index, skip = 0, ""
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if opened is None:
            marker = SKIP.search(lines[index])
            if marker:
                skip = marker.group(1)
            elif lines[index].strip():
                skip = ""
            index += 1
            continue
        indent, fence, info = opened.group(1), opened.group(2), opened.group(3).strip()
        end = index + 1
        while end < len(lines) and not lines[end].lstrip(" ").startswith(fence[0] * len(fence)):
            end += 1
        body = [line[len(indent) :] if line.startswith(indent) else line for line in lines[index + 1 : end]]
        found.append(Block(info.split()[0] if info else "", body, index + 1, skip))
        skip = ""
        index = end + 1
    for before, after in zip(found, found[1:], strict=False):
        between = lines[before.line + len(before.lines) + 1 : after.line - 1]
        if before.label == "console" and after.label == "text" and not any(s.strip() for s in between):
            before.expected = after.lines
    return found


def commands(block: Block) -> list[tuple[str, int]]:
    """A console block's commands (continuations joined) and the exit code each must give."""
    found: list[tuple[str, int]] = []
    pending = ""
    for line in block.lines:
        text = line[2:] if line.startswith("$ ") and not pending else line
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        command = pending + text
        pending = ""
        code = EXIT.search(command)
        found.append((command, int(code.group(1)) if code else 0))
    return found


def expected_lines(block: Block) -> list[str]:
    """The lines of a text block the output must hold: those with no time and no absolute path,
    spaces normalised and progress counters left out."""
    return [
        normalised(line)
        for line in block.expected
        if line.strip() and not TIME.search(line) and not ABSOLUTE_PATH.search(line)
    ]


def normalised(text: str) -> str:
    """``text`` with every run of white space one space, and no progress counter ("[3/4] ")."""
    return " ".join(PROGRESS.sub("", text).split())


def fresh_copy(into: Path) -> Path:
    """The repository's tracked files (as they are now in the working tree) copied to ``into``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = REPO / name.decode()
        if source.is_file():
            target = into / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


def environment(home: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("COURSE_")},
        "PATH": f"{os.environ.get('PATH', '')}:{bin_dir}",
        "HOME": str(home),
        "NO_COLOR": "1",
        "COLUMNS": "80",
        "COURSE_SERVER": "off",
    }


def check_document(name: str, keep: bool = False, root: Path = REPO) -> list[str]:
    """Run the console blocks of the document ``root/name`` in a fresh copy of the repository;
    the problems found (each one line)."""
    problems: list[str] = []
    scratch = Path(tempfile.mkdtemp(prefix="docs-check-"))
    folder = fresh_copy(scratch / "repository")
    env = environment(scratch / "home")
    (scratch / "home").mkdir()
    where = folder
    try:
        for block in blocks((root / name).read_text(encoding="utf-8")):
            if block.label != "console":
                continue
            if block.skip:
                print(f"{name}:{block.line}: skipped: {block.skip}")
                continue
            output = ""
            for command, code in commands(block):
                state = scratch / "cwd"
                script = f'cd "{where}"\n{command}\ncode=$?\npwd > "{state}"\nexit $code\n'
                try:
                    done = subprocess.run(
                        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=TIMEOUT
                    )
                except subprocess.TimeoutExpired:
                    problems.append(f"{name}:{block.line}: `{command}` ran over {TIMEOUT} s")
                    break
                where = Path(state.read_text().strip()) if state.exists() else where
                output += done.stdout + done.stderr
                print(f"{name}:{block.line}: $ {command}  -> exit {done.returncode}")
                if done.returncode != code:
                    problems.append(
                        f"{name}:{block.line}: `{command}` exited {done.returncode}, documented {code}: "
                        + " ".join((done.stdout + done.stderr).split())[-600:]
                    )
            said = normalised(output)
            for line in expected_lines(block):
                if line not in said:
                    problems.append(f"{name}:{block.line}: not in the output: {line!r}")
    finally:
        if keep:
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("documents", nargs="*", help="documents to check (default: README.md, docs/*.md)")
    parser.add_argument("--keep", action="store_true", help="keep each document's scratch folder")
    args = parser.parse_args()
    problems = []
    for name in args.documents or DOCUMENTS:
        problems += check_document(name, args.keep)
    for problem in problems:
        print("PROBLEM " + problem)
    print(f"{len(problems)} problems" if problems else "every documented command ran as documented")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
