"""What an instructor's secret changes, measured on the grader's side: for each lesson, whether
every correct implementation the project holds passes under each secret, and which calls under a
secret still hand learner code the inputs of a public grade (allowed only in checks marked
``@enumerable``).

    python tools/secret_inputs.py [--lessons 1,2] [--secrets 20] [--seed N] [--solution-only]
                                  [--save-public FILE | --compare-public FILE]
    python tools/secret_inputs.py --docs

``--save-public`` writes every public call (check, function, digest) of the solutions;
``--compare-public`` says which public calls changed since (a change to a grading test must leave
the public grade as it was). Exits 1 when anything is wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers import solutions_with  # noqa: E402 - the repository's root is put on the path first
from tests.secret_calls import (  # noqa: E402
    correct_implementations,
    enumerable_checks,
    enumerable_table,
    equal_to_public,
    failed_checks,
    graded_and_heard,
    random_secrets,
    within_file,
)


def main() -> int:
    from course.content.catalog import load_catalog

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lessons", help="lesson numbers or names, comma-separated (default: all)")
    parser.add_argument("--secrets", type=int, default=3, help="how many random secrets (default 3)")
    parser.add_argument("--seed", type=int, help="draw the secrets from this seed")
    parser.add_argument("--solution-only", action="store_true", help="grade only the reference solutions")
    parser.add_argument("--save-public", type=Path, metavar="FILE")
    parser.add_argument("--compare-public", type=Path, metavar="FILE")
    parser.add_argument(
        "--docs", action="store_true", help="print docs/instructors.md's list of enumerable checks"
    )
    args = parser.parse_args()
    if args.docs:
        print(enumerable_table(), end="")
        return 0
    catalog = load_catalog()
    lessons = catalog.resolve_list(args.lessons)
    keys = random_secrets(args.secrets, args.seed)
    wrong = 0
    saved: dict[str, list[list[str]]] = {}
    before = json.loads(args.compare_public.read_text()) if args.compare_public else {}
    for lesson in lessons:
        module = lesson.module
        enumerable = enumerable_checks(module)
        with tempfile.TemporaryDirectory() as tmp:
            folder = solutions_with(Path(tmp), module, (lesson.reference).read_text(encoding="utf-8"))
            public_result, public = graded_and_heard(folder, module)
        saved[module] = [[within_file(c.check), c.function, c.digest] for c in public]
        print(f"{module}: public {public_result['status']}, {len(public)} calls")
        if module in before and before[module] != saved[module]:
            changed = {tuple(x) for x in saved[module]} ^ {tuple(x) for x in before[module]}
            checks = sorted({check for check, _, _ in changed})
            print(f"  public calls changed in {len(checks)} checks: {', '.join(checks[:8])}")
            wrong += 1
        implementations = correct_implementations(module)[: 1 if args.solution_only else None]
        for number, key in enumerate(keys, 1):
            for label, source in implementations:
                with tempfile.TemporaryDirectory() as tmp:
                    result, heard = graded_and_heard(solutions_with(Path(tmp), module, source), module, key)
                if result["status"] != "passed":
                    wrong += 1
                    print(f"  secret {number}: {label} fails:")
                    for line in failed_checks(result)[:5]:
                        print("    " + line.replace("\n", " ")[:400])
                if label != "solution":
                    continue
                same = [c for c in equal_to_public(public, heard) if within_file(c.check) not in enumerable]
                if same:
                    wrong += 1
                    checks = sorted({within_file(c.check) for c in same})
                    print(
                        f"  secret {number}: {len(same)} calls equal to public ones in: {', '.join(checks)}"
                    )
    if args.save_public:
        args.save_public.write_text(json.dumps(saved, indent=1) + "\n")
    print("OK" if not wrong else f"{wrong} problems")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
