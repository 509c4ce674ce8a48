"""A class graded on an engine instructors already run: a GitHub Actions matrix workflow and a
Kubernetes indexed Job, each grading one shard per job (`course grade --shard K/N`), then one
merge (`course gradebook merge`).

Both treat `course grade`'s exit code 1 (some row needs a look) as a job that succeeded: the
merge says which rows, and its own exit code 1 becomes a warning, not a failure; 2 (a usage error,
or the grader itself failed) fails the job. The instructor's secret, if any, comes from the
engine's secret store (a repository secret, a Kubernetes Secret) and never from the files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from course.content.catalog import Lesson

SECRET = "COURSE_GRADING_SECRET"

# A shard's command, in both templates: it passes when the grade exits 0 or 1 (1: some row needs a
# look), and fails on 2.
SHARD_COMMAND = (
    'code=0; course grade {submissions} --lessons {lessons} --shard "{shard}/{count}" '
    '--out "shard-{shard}.csv" --json "{reports}/shard-{shard}.json" || code=$?; test "$code" -le 1'
)


def _lesson_list(lessons: Sequence[Lesson]) -> str:
    return ",".join(str(lesson.number) for lesson in lessons)


def github_actions(lessons: Sequence[Lesson], shards: int, submissions: str, install: str) -> str:
    """A workflow (`.github/workflows/grade-class.yml`) of one job per shard (a matrix), then a
    merge job that uploads the gradebook, the JSON report and JUnit XML as an artifact."""
    q = json.dumps  # a JSON string is a valid YAML scalar
    grade = SHARD_COMMAND.format(
        submissions=q(submissions),
        lessons=_lesson_list(lessons),
        shard="${{ matrix.shard }}",
        count=shards,
        reports=".",
    )
    merge = (
        "code=0; course gradebook merge shard-*.json --out gradebook.csv --json report.json "
        "--junit junit.xml || code=$?; "
        'if [ "$code" -eq 1 ]; then echo "::warning::some submissions need a look: see the '
        'problems column of gradebook.csv"; fi; test "$code" -le 1'
    )
    setup = [
        "    - uses: actions/checkout@v4",
        "    - uses: actions/setup-python@v5",
        "      with:",
        "        python-version: '3.11'",
        "    - name: Install the course",
        f"      run: {q(install)}",
    ]
    lines = [
        "name: Grade the class",
        "'on':",
        "  workflow_dispatch: {}",
        "permissions:",
        "  contents: read",
        "jobs:",
        "  grade:",
        "    runs-on: ubuntu-latest",
        "    strategy:",
        "      fail-fast: false",
        "      matrix:",
        f"        shard: {json.dumps(list(range(1, shards + 1)))}",
        "    steps:",
        *setup,
        f"    - name: Grade shard ${{{{ matrix.shard }}}} of {shards}",
        "      env:",
        f"        {SECRET}: ${{{{ secrets.{SECRET} }}}}",
        f"      run: {q(grade)}",
        "    - uses: actions/upload-artifact@v4",
        "      with:",
        "        name: shard-${{ matrix.shard }}",
        "        path: shard-${{ matrix.shard }}.json",
        "  merge:",
        "    needs: grade",
        "    runs-on: ubuntu-latest",
        "    steps:",
        *setup,
        "    - uses: actions/download-artifact@v4",
        "      with:",
        "        pattern: shard-*",
        "        merge-multiple: true",
        "    - name: Merge the shards",
        f"      run: {q(merge)}",
        "    - uses: actions/upload-artifact@v4",
        "      with:",
        "        name: gradebook",
        "        path: |",
        "          gradebook.csv",
        "          report.json",
        "          junit.xml",
    ]
    return "\n".join(lines) + "\n"


def kubernetes_job(lessons: Sequence[Lesson], shards: int, image: str, claim: str, name: str) -> str:
    """An indexed Job of ``shards`` completions. Kubernetes numbers them from 0
    (``JOB_COMPLETION_INDEX``); shard K is index K - 1. Each pod mounts the volume claim
    ``claim`` at /class, grades /class/submissions and writes /class/shards/shard-K.json; the
    secret comes from the Secret ``course-grading-secret`` (key ``secret``) when there is one."""
    grade = (
        "k=$((JOB_COMPLETION_INDEX + 1)); mkdir -p /class/shards && cd /class/shards && "
        + SHARD_COMMAND.format(
            submissions="/class/submissions",
            lessons=_lesson_list(lessons),
            shard="$k",
            count=shards,
            reports="/class/shards",
        )
    )
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": shards,
            "parallelism": shards,
            "backoffLimitPerIndex": 1,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "grade",
                            "image": image,
                            "command": ["sh", "-c", grade],
                            "env": [
                                {
                                    "name": SECRET,
                                    "valueFrom": {
                                        "secretKeyRef": {
                                            "name": "course-grading-secret",
                                            "key": "secret",
                                            "optional": True,
                                        }
                                    },
                                }
                            ],
                            "volumeMounts": [{"name": "class", "mountPath": "/class"}],
                        }
                    ],
                    "volumes": [{"name": "class", "persistentVolumeClaim": {"claimName": claim}}],
                }
            },
        },
    }
    # JSON is YAML: `kubectl apply -f` reads the file as it is.
    return json.dumps(job, indent=2) + "\n"
