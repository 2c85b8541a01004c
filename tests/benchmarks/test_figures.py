"""The figures the docs quote: each marked value equals what its result file gives, and a marker
that names a missing file, an undeclared figure or a stale value fails the check."""

from __future__ import annotations

import json

import pytest

from benchmarks.figures import Figure, FigureError, check, marked_docs, rewrite
from benchmarks.figures_declared import FIGURES
from benchmarks.results import REPO


def test_every_marked_figure_in_the_docs_is_what_its_result_file_gives():
    problems = check(FIGURES)
    assert problems == [], "\n".join(problems) + "\nrun `python -m benchmarks.figures` (or fix the declaration)"


def test_the_readme_headline_figures_are_marked():
    readme = (REPO / "README.md").read_text()
    for name in ("h200_2.knobs.bf16_sdpa_fused", "h200_2.vs_bare.hpo_mfu", "h200_2.bigc.mfu", "h200_2.vs_bare.throughput"):
        assert f"<!-- figure: {name} -->" in readme, name


def test_each_declared_figure_has_one_name():
    names = [f.name for f in FIGURES]
    assert len(names) == len(set(names))


def _repo(tmp_path, doc: str, result: dict | None = None):
    (tmp_path / "docs" / "benchmarks").mkdir(parents=True)
    (tmp_path / "README.md").write_text(doc)
    results = tmp_path / "results"
    results.mkdir()
    if result is not None:
        (results / "run.json").write_text(json.dumps(result))
    return results


RESULT = {"meta": {"date": "2026-11-28T20:30:02"}, "summary": {"ratio": 0.99912, "per_round": [0.9973, 1.0013]}}
RATIO = Figure(name="ratio", file="run.json", path="summary.ratio", format="{:.3f}x", date="2026-11-28")


def test_a_stale_figure_is_reported_by_the_check_and_rewritten_from_its_file(tmp_path):
    results = _repo(tmp_path, "hpo ran at <!-- figure: ratio -->0.94x<!-- /figure --> the bare loop.\n", RESULT)
    problems = check([RATIO], tmp_path, results)
    assert any("figure 'ratio' reads '0.94x', its file gives '0.999x'" in p for p in problems)
    assert "0.94x" in (tmp_path / "README.md").read_text()  # the check changes nothing

    assert rewrite([RATIO], tmp_path, results) == []
    assert (tmp_path / "README.md").read_text() == "hpo ran at <!-- figure: ratio -->0.999x<!-- /figure --> the bare loop.\n"
    page = (tmp_path / "docs" / "benchmarks" / "figures.md").read_text()
    assert "| `ratio` | 0.999x | `run.json` | `summary.ratio` | 2026-11-28 |" in page
    assert check([RATIO], tmp_path, results) == []


def test_a_figure_whose_result_file_does_not_exist_fails_the_check(tmp_path):
    results = _repo(tmp_path, "<!-- figure: ratio -->0.999x<!-- /figure -->\n")
    problems = check([RATIO], tmp_path, results)
    assert any("its result file" in p and "run.json does not exist" in p for p in problems)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("<!-- figure: speedup -->1.79x<!-- /figure -->\n", "marker names 'speedup', which"),
        ("<!-- figure: ratio -->0.999x\n<!-- /figure -->\n", "not all are"),  # split over two lines
    ],
)
def test_a_marker_the_declarations_cannot_fill_fails_the_check(tmp_path, doc, message):
    results = _repo(tmp_path, doc, RESULT)
    rewrite([RATIO], tmp_path, results)  # the page exists: only the marker is wrong
    assert any(message in p for p in check([RATIO], tmp_path, results))


@pytest.mark.parametrize(
    ("figure", "message"),
    [
        (Figure(name="r", file="run.json", path="summary.ratio", format="{:.2f}", date="2026-11-26"), "was written 2026-11-28"),
        (
            Figure(name="r", file="run.json", path="summary.missing", format="{:.2f}", date="2026-11-28"),
            "has no 'summary.missing'",
        ),
        (Figure(name="r", file="run.json", path="re:x ([\\d.]+)", format="{:.2f}", date="2026-11-28"), "matches nothing"),
    ],
)
def test_a_declaration_its_file_contradicts_is_refused(tmp_path, figure, message):
    results = _repo(tmp_path, "", RESULT)
    with pytest.raises(FigureError, match=message):
        figure.text({"r": figure}, results)


def test_lists_ratios_of_two_files_and_text_files_are_read_as_declared(tmp_path):
    results = _repo(tmp_path, "", RESULT)
    (results / "bare.txt").write_text("bare: 335.1 samples/s, peak mem 9389 MB\n")
    rounds = Figure(name="rounds", file="run.json", path="summary.per_round", format="{:.3f}", date="2026-11-28")
    bare = Figure(name="bare", file="bare.txt", path=r"re:bare: ([\d.]+) samples/s", format="{:.0f}", date="2026-11-26")
    share = Figure(name="share", file="run.json", path="summary.ratio", format="{:.1%}", date="2026-11-28", over="bare")
    declared = {f.name: f for f in (rounds, bare, share)}
    assert rounds.text(declared, results) == "0.997, 1.001"
    assert bare.text(declared, results) == "335"
    assert share.text(declared, results) == f"{0.99912 / 335.1:.1%}"


def test_the_generated_reference_pages_carry_no_markers_and_are_not_scanned():
    docs = marked_docs()
    assert REPO / "README.md" in docs
    assert not any("reference" in p.parts or p.name == "figures.md" for p in docs)


def test_filters_chain_over_rows_and_a_key_after_them_reads_each_row_kept(tmp_path):
    results = _repo(tmp_path, "")
    rows = [
        {"workers": 100, "via": "postgres", "errors": 1, "seed": 0},
        {"workers": 100, "via": "pgbouncer", "errors": 0, "seed": 0},
        {"workers": 200, "via": "postgres", "errors": 101, "seed": 1},
    ]
    (results / "conn.json").write_text(json.dumps({"date": "2026-11-25", "rows": rows}))

    def read(path):
        figure = Figure(name="f", file="conn.json", path=path, format="{}", date="2026-11-25")
        return figure.text({"f": figure}, results)

    assert read("rows[workers=100][via=postgres].errors") == "1"  # two rows, then one
    assert read("rows[workers=200][via=postgres].errors") == "101"  # a single row, then filtered again
    assert read("rows[via=postgres].errors") == "1, 101"  # every row kept, in file order
    with pytest.raises(FigureError, match=r"has no 'rows\[workers=300\]\.errors'"):
        read("rows[workers=300].errors")


def test_a_summary_reads_through_named_fields_and_pairs_divide_item_by_item(tmp_path):
    results = _repo(tmp_path, "")
    runs = [
        {"side": "hf", "wall_s": 50.0},
        {"side": "hpo", "wall_s": 45.0},
        {"side": "hf", "wall_s": 40.0},
        {"side": "hpo", "wall_s": 44.0},
    ]
    summary = {"hpo": {"wall_s": {"median": 44.5, "min": 44.0, "max": 45.0}}}
    (results / "vs.json").write_text(json.dumps({"date": "2026-11-25", "runs": runs, "summary": summary}))
    day = {"file": "vs.json", "date": "2026-11-25"}
    wall = Figure(name="wall", path="summary.hpo.wall_s", format="{median:.2f} ({min:.2f}–{max:.2f})", **day)
    hf = Figure(name="hf", path="runs[side=hf].wall_s", format="{}", **day)
    pairs = Figure(name="pairs", path="runs[side=hpo].wall_s", format="{:.2f}", over="hf", **day)
    declared = {f.name: f for f in (wall, hf, pairs)}
    assert wall.text(declared, results) == "44.50 (44.00–45.00)"
    assert pairs.text(declared, results) == "0.90, 1.10"  # each hpo run over the hf run of its pair
