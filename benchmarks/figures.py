"""The figures the docs quote, each declared once with the result file it comes from.

A doc carries a declared figure between markers, `<!-- figure: NAME -->1.79x<!-- /figure -->`.
`python -m benchmarks.figures` rewrites every marked value from its file and regenerates
`docs/benchmarks/figures.md` (each figure with its file, place in the file and date);
`python -m benchmarks.figures --check` changes nothing and lists each marked figure that differs from
its file, names an undeclared figure, or whose file, value or date is not there. The suite runs the
check (`tests/benchmarks/test_figures.py`). The figures themselves are in `benchmarks/figures_declared.py`.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.results import REPO, RESULTS

__all__ = ["Figure", "FigureError", "check", "figures_page", "main", "marked_docs", "rewrite"]

MARKER = re.compile(r"<!-- figure: (?P<name>[\w.-]+) -->(?P<text>.*?)<!-- /figure -->")
_STEP = re.compile(r"\.?(?P<key>[\w-]+)|\[(?P<index>\d+)\]|\[(?P<field>\w+)=(?P<match>[^\]]+)\]")
PAGE = REPO / "docs" / "benchmarks" / "figures.md"


class FigureError(ValueError):
    """A declared figure whose file, value or date is not what the declaration says."""


@dataclass(frozen=True, kw_only=True)
class Figure:
    """One quoted figure. `path` finds the value in a JSON file (`summary.throughput_ratio`,
    `rows[config=bf16].samples_per_s_ratio`, `runs[0].peak_mem_mb`) or, for a text file, is
    `re:` and a pattern whose first group is the number. A list value is formatted item by item."""

    name: str
    file: str  # relative to benchmarks/results/
    path: str
    format: str  # a str.format pattern for the value: "{:.2f}x", "{:.1%}"
    date: str  # the day it was measured (YYYY-MM-DD); checked against the file's own date where it has one
    scale: float = 1.0  # the value is multiplied by it first (MB to GB: 0.001)
    over: str | None = None  # the name of another figure this one is divided by (a ratio of two files)

    def raw(self, results: Path = RESULTS) -> float | list[float]:
        path = results / self.file
        if not path.is_file():
            raise FigureError(f"figure {self.name!r}: its result file {path} does not exist; declare the file it was read from")
        text = path.read_text()
        if self.path.startswith("re:"):
            found = re.search(self.path.removeprefix("re:"), text)
            if found is None:
                raise FigureError(f"figure {self.name!r}: pattern {self.path!r} matches nothing in {self.file}")
            return float(found.group(1))
        data = json.loads(text)
        _check_date(self, data)
        return _find(data, self.path, self)

    def value(self, declared: dict[str, Figure], results: Path = RESULTS) -> float | list[float] | dict:
        raw = self.raw(results)
        if self.over is not None:
            below = declared[self.over].raw(results)
            raw = [a / b for a, b in zip(raw, below, strict=True)] if isinstance(raw, list) else raw / below
        if self.scale == 1.0:
            return raw
        return [v * self.scale for v in raw] if isinstance(raw, list) else raw * self.scale

    def text(self, declared: dict[str, Figure], results: Path = RESULTS) -> str:
        """The value as the doc shows it: a list item by item, a dict (a summary's median, min and
        max) through the format's field names: "{median:.2f} ({min:.2f}–{max:.2f})"."""
        value = self.value(declared, results)
        if isinstance(value, list):
            return ", ".join(self.format.format(v) for v in value)
        if isinstance(value, dict):
            return self.format.format(**value)
        return self.format.format(value)


def _find(data, path: str, figure: Figure):
    """Follow `path` through `data`. `[field=value]` keeps the items of a list whose field reads
    `value` (the item itself when one does); a key after it is read from each item kept."""
    at = data
    for step in _STEP.finditer(path):
        try:
            if step["key"] is not None:
                at = [item[step["key"]] for item in at] if isinstance(at, list) else at[step["key"]]
            elif step["index"] is not None:
                at = at[int(step["index"])]
            else:
                items = [at] if isinstance(at, dict) else at  # a filter before kept one item
                kept = [item for item in items if str(item.get(step["field"])) == step["match"]]
                if not kept:
                    raise KeyError(step[0])
                at = kept[0] if len(kept) == 1 else kept
        except (KeyError, IndexError, TypeError, AttributeError):
            raise FigureError(f"figure {figure.name!r}: {figure.file} has no {path!r} (stopped at {step[0]!r})") from None
    if at is None:
        raise FigureError(f"figure {figure.name!r}: {figure.file} holds null at {path!r}: nothing was measured there")
    return at


def _check_date(figure: Figure, data) -> None:
    meta = data.get("meta", data) if isinstance(data, dict) else {}
    recorded = meta.get("date") if isinstance(meta, dict) else None
    if isinstance(recorded, str) and not recorded.startswith(figure.date):
        raise FigureError(f"figure {figure.name!r}: declared date {figure.date} but {figure.file} was written {recorded}")


def marked_docs(repo: Path = REPO) -> list[Path]:
    """README.md and every page under docs/ but the generated ones (the reference, the figures page)."""
    generated = repo / PAGE.relative_to(REPO)
    pages = sorted(
        p for p in (repo / "docs").rglob("*.md") if "reference" not in p.relative_to(repo / "docs").parts and p != generated
    )
    return [repo / "README.md", *pages]


def _render(doc: str, texts: dict[str, str], where: str, problems: list[str], stale: list[str]) -> str:
    opened = doc.count("<!-- figure:")
    if opened != len(MARKER.findall(doc)):
        problems.append(
            f"{where}: {opened} figure markers open but not all are `<!-- figure: NAME -->VALUE<!-- /figure -->` on one line"
        )

    def one(marker: re.Match) -> str:
        name = marker["name"]
        if name not in texts:
            problems.append(f"{where}: marker names {name!r}, which benchmarks/figures_declared.py does not declare")
            return marker[0]
        if marker["text"] != texts[name]:
            stale.append(f"{where}: figure {name!r} reads {marker['text']!r}, its file gives {texts[name]!r}")
        return f"<!-- figure: {name} -->{texts[name]}<!-- /figure -->"

    return MARKER.sub(one, doc)


def _texts(figures: list[Figure], results: Path, problems: list[str]) -> dict[str, str]:
    declared = {f.name: f for f in figures}
    texts = {}
    for figure in figures:
        try:
            texts[figure.name] = figure.text(declared, results)
        except FigureError as error:
            problems.append(str(error))
    return texts


def figures_page(figures: list[Figure], texts: dict[str, str]) -> str:
    """docs/benchmarks/figures.md: every declared figure, its value, file, place and date."""
    lines = [
        "# Where each figure comes from",
        "",
        "Generated by `python -m benchmarks.figures` from `benchmarks/figures_declared.py`; do not edit.",
        "Each figure the docs quote between figure markers (an HTML comment naming the figure before the",
        "value, and one closing it after) is read from a file under `benchmarks/results/`, and a test",
        "fails when a quoted value differs from its file or its file does not exist.",
        "",
        "| figure | value | file | where in the file | measured |",
        "| --- | --- | --- | --- | --- |",
    ]
    for f in figures:
        where = f.path.replace("|", "\\|") + (f" ÷ `{f.over}`" if f.over else "")
        lines.append(f"| `{f.name}` | {texts.get(f.name, '(missing)')} | `{f.file}` | `{where}` | {f.date} |")
    return "\n".join(lines) + "\n"


def rewrite(figures: list[Figure], repo: Path = REPO, results: Path = RESULTS, write: bool = True) -> list[str]:
    """Regenerate every marked figure and the figures page; return the problems found (with
    write=False: change nothing, only report)."""
    problems: list[str] = []
    stale: list[str] = []
    texts = _texts(figures, results, problems)
    page = repo / PAGE.relative_to(REPO)
    outputs = {page: figures_page(figures, texts)}
    for doc in marked_docs(repo):
        outputs[doc] = _render(doc.read_text(), texts, str(doc.relative_to(repo)), problems, stale)
    if not page.is_file() or page.read_text() != outputs[page]:
        stale.append(f"{page.relative_to(repo)} is stale: run `python -m benchmarks.figures`")
    if not write:
        return problems + stale
    for path, text in outputs.items():
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
    return problems


def check(figures: list[Figure], repo: Path = REPO, results: Path = RESULTS) -> list[str]:
    return rewrite(figures, repo, results, write=False)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.figures_declared import FIGURES

    argv = sys.argv[1:] if argv is None else argv
    problems = check(FIGURES) if "--check" in argv else rewrite(FIGURES)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
