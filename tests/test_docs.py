"""The docs site: its reference pages are generated from the code and current, and the site builds
strictly (a broken link or a page missing from the navigation fails)."""

from __future__ import annotations

import os
import re
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
    for path in _pages():
        text = path.read_text()
        assert "../shared" not in text and "/work/" not in text, path


# A repository path as the docs write one: `hpo/verify/fault/_differential.py`, tests/x.py::test_y, docs/cli.md.
_REPO_PATH = re.compile(r"(?<![\w/.:-])((?:[\w.-]+/)+[\w.-]+\.(?:md|py|ya?ml))(?![\w/])")
_MARKDOWN_NAME = re.compile(r"(?<![\w/.:-])([\w.-]+\.md)(?![\w/])")
_LINK = re.compile(r"\]\(([^)#\s]+)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _markdown_names_in_repository() -> set[str]:
    names = set()
    for _folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [s for s in subfolders if not s.startswith((".", "__")) and s not in ("site", "studies")]
        names.update(f for f in files if f.endswith(".md"))
    return names


def _missing_files_named(page: Path, top_folders: set[str], markdown_names: set[str]) -> list[str]:
    """What `page` names that the repository does not hold: a relative link; a path that starts at a
    folder of the repository (hpo/, tests/, docs/, ...) and ends in .md, .py or .yaml; and any .md
    file, which the docs name only to send the reader to it. Paths into other projects
    (`torch/optim/adam.py`) and placeholders (`<name>.py`, `*.yaml`) are not the repository's."""
    text, missing = page.read_text(), []
    for target in _LINK.findall(text):
        if not re.match(r"[a-z]+:", target) and not (page.parent / target).exists():
            missing.append(target)
    for path in _REPO_PATH.findall(text):
        if path.split("/")[0] in top_folders and not (ROOT / path).exists() and not (page.parent / path).exists():
            missing.append(path)
    missing += [name for name in _MARKDOWN_NAME.findall(text) if name not in markdown_names]
    return missing


def test_the_docs_name_no_file_that_the_repository_does_not_hold():
    """The docs stand alone: a reader of the site, or of a clone, can open every file they name."""
    top_folders = {p.name for p in ROOT.iterdir() if p.is_dir() and p.name not in (".git", ".venv")}
    markdown_names = _markdown_names_in_repository()
    missing = {str(page.relative_to(ROOT)): _missing_files_named(page, top_folders, markdown_names) for page in _pages()}
    assert not {page: names for page, names in missing.items() if names}, "name files the repository does not hold"


def test_the_readmes_exit_code_table_is_the_one_in_hpo_errors():
    assert exit_code_table() in (ROOT / "README.md").read_text(), "README.md: paste hpo.errors.exit_code_table()"
