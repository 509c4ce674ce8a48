"""How the feedback reads on the mistakes written blind (tests/uncatalogued/): per lesson, how
many are named right, inferable, generic, named wrong, pass, or pass as marked harmless
(tests.helpers.feedback_kind says which is which).

    python tools/uncatalogued_feedback.py [--json FILE] [--verbose]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers import (  # noqa: E402 - the repository's root is put on the path first
    UNCATALOGUED,
    classic_mistakes,
    feedback_kind,
    grade_folder,
    mistaken_source,
    named_ids,
    solutions_with,
)

KINDS = ("named right", "inferable", "generic", "wrong", "false pass", "harmless")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write every mistake's kind and names here")
    parser.add_argument("--verbose", action="store_true", help="print each mistake's kind and names")
    args = parser.parse_args()
    rows = []
    for module, mistake in classic_mistakes(UNCATALOGUED):
        with tempfile.TemporaryDirectory() as tmp:
            result = grade_folder(solutions_with(Path(tmp), module, mistaken_source(module, mistake)), module)
        kind = feedback_kind(result, mistake)
        names = sorted({name for ids in named_ids(result) for name in ids})
        rows.append({"lesson": module, "mistake": mistake["name"], "kind": kind, "named": names})
        if args.verbose:
            print(f"{module:22} {mistake['name']:40} {kind:12} {', '.join(names)}")
    lessons = sorted({row["lesson"] for row in rows})
    print(f"{'lesson':22}" + "".join(f"{kind:>13}" for kind in KINDS))
    for lesson in [*lessons, "all"]:
        counts = Counter(row["kind"] for row in rows if lesson in ("all", row["lesson"]))
        print(f"{lesson:22}" + "".join(f"{counts[kind]:>13}" for kind in KINDS))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
