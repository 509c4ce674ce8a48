"""The project's tests grade in the calling process: no warm grader is left running after them
(tests/test_server.py starts and stops its own).

They run in parallel (pytest-xdist, `-n auto` in pyproject.toml): tests are handed out one by
one, except that the tests of a module defining a module- or class-scoped fixture (a built
wheel, generated notebooks, trained weights) go to one test process together, so the fixture is
made once rather than once per process. (`--dist loadgroup` would do this with markers, but
pytest-xdist 3.8 cannot group under pytest 9, whose node ids it no longer rewrites.)
"""

import functools
import os
import re
from pathlib import Path

import pytest

os.environ["COURSE_SERVER"] = "off"
os.environ["COURSE_CACHE"] = "off"  # every test grades; tests/test_result_cache.py turns it on

SHARED_FIXTURE = re.compile(r"""@pytest\.fixture\(\s*scope\s*=\s*["'](module|class)["']""")


@functools.cache
def shares_a_fixture(module: Path) -> bool:
    try:
        return SHARED_FIXTURE.search(module.read_text(encoding="utf-8")) is not None
    except OSError:
        return False


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    class OneByOneButModulesWithSharedFixtures(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if shares_a_fixture(config.rootpath / module) else nodeid

    return OneByOneButModulesWithSharedFixtures(config, log)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--every-secret",
        action="store_true",
        help="also run the instructor's-secret sweep (every lesson, 20 random secrets; its own CI step)",
    )
