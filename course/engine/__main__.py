"""``python -m course.engine DIR LESSON``: grade one folder as one lesson and print JSON.

For maintainers and tools (it ignores workspaces and progress): the project's tests grade
``solutions/``, ``lessons/`` and deliberately broken copies with it.
"""

from __future__ import annotations

import json
import sys

from course.content.catalog import UnknownLesson, load_catalog
from course.engine.grading.runner import grade


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m course.engine DIR LESSON", file=sys.stderr)
        return 2
    try:
        lesson = load_catalog().resolve(argv[1])
    except UnknownLesson as exc:
        print(exc, file=sys.stderr)
        return 2
    result = grade(lesson, argv[0])
    print(json.dumps(result.to_dict(), indent=2))
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
