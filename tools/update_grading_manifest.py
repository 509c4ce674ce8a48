"""Record the grading tests as pristine: writes course/content/grading_manifest.json (hashes) and
course/content/grading_pristine.zip (their bytes). Run it after changing anything in tests/lessons/;
tests/test_integrity.py fails until you do.

    python tools/update_grading_manifest.py
"""

from course.engine.integrity import MANIFEST, write_manifest

if __name__ == "__main__":
    files = write_manifest()
    print(f"{MANIFEST.name}: {len(files)} grading files recorded")
