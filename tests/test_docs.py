"""The docs site: its reference pages are generated from the code and current, and the site builds
strictly (a broken link or a page missing from the navigation fails)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpo.app.docgen import PAGES
from hpo.errors import exit_code_table

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(PAGES))
def test_each_reference_page_is_generated_from_the_code_and_current(name):
    page = ROOT / "docs" / "reference" / name
    assert page.read_text() == PAGES[name](), f"docs/reference/{name} is stale: run `python -m hpo.app.docgen`"


def test_the_search_space_reference_lists_every_key_with_its_default_and_rule():
    page = PAGES["search-space.md"]()
    for key, default, rule in [("study.slow_ratio", "`5.0`", "gt=1"), ("study.trial_timeout_s", "`None`", "gt=0")]:
        assert f"| `{key}` |" in page and default in page.split(f"| `{key}` |")[1].splitlines()[0]
        assert rule in page.split(f"| `{key}` |")[1].splitlines()[0]


def test_the_site_builds_strictly(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "search-space" / "index.html").exists()


def test_nothing_in_the_readme_or_docs_points_outside_the_repository():
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text()
        assert "../shared" not in text and "/work/" not in text, path


def test_the_readmes_exit_code_table_is_the_one_in_hpo_errors():
    assert exit_code_table() in (ROOT / "README.md").read_text(), "README.md: paste hpo.errors.exit_code_table()"
