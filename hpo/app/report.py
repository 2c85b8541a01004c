"""`hpo report`: one self-contained HTML page about a study, readable with no network.

It holds the optimization history (trials that trained, and the rejected ones apart on their own
row, since their recorded values are placeholders), parameter importances for the primary metric
and for throughput (hyperparameters and systems knobs together, computed over the trials that
trained), the Pareto front for several objectives, the knob-effect table, the best trial's config
with the command that retrains it, and every trial's verdict and knobs. plotly.js is inlined once.
"""

from __future__ import annotations

import html
from pathlib import Path

import optuna
import yaml

from hpo.errors import UserInputError
from hpo.files import write_atomic
from hpo.knobs.registry import KNOB_NAMES
from hpo.masking import mask_secrets
from hpo.records import RecordKey
from hpo.reporting import best_trials, cells, header, knob_effects, observed_knob, trained_trials
from hpo.verdicts import Verdict

__all__ = ["write_report"]

STYLE = "body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"


def _visualization():
    try:
        from optuna import visualization as vis
    except ImportError:
        vis = None
    if vis is None or not vis.is_available():
        raise UserInputError("hpo report needs plotly: pip install 'hpo[dashboard]'")
    return vis


def _history(study: optuna.Study, name: str, index: int):
    import plotly.graph_objects as go

    trained = trained_trials(study)
    numbers = {t.number for t in trained}
    rejected = [t for t in study.get_trials(deepcopy=False) if t.number not in numbers and t.user_attrs.get(RecordKey.VERDICT)]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[t.number for t in trained], y=[t.values[index] for t in trained], mode="markers", name="trained"))
    line = _best_so_far(trained, index, minimize=study.directions[index] == optuna.study.StudyDirection.MINIMIZE)
    fig.add_trace(go.Scatter(x=[n for n, _ in line], y=[b for _, b in line], mode="lines", name="best so far"))
    fig.add_trace(go.Scatter(
        x=[t.number for t in rejected], y=[0] * len(rejected), yaxis="y2", mode="markers", name="rejected (no value)",
        marker={"symbol": "x", "color": "crimson", "size": 10}, text=[str(t.user_attrs.get(RecordKey.VERDICT)) for t in rejected],
    ))  # fmt: skip
    fig.update_layout(
        title=f"Optimization history: {name}", xaxis_title="trial", yaxis={"title": name, "domain": [0.2, 1]},
        yaxis2={"domain": [0, 0.1], "showticklabels": False, "title": "rejected"},
    )  # fmt: skip
    return fig


def _best_so_far(trained: list, index: int, minimize: bool) -> list[tuple[int, float]]:
    """(trial number, the best value of objective `index` up to that trial), in trial order."""
    best, line = None, []
    for t in sorted(trained, key=lambda t: t.number):
        v = t.values[index]
        best = v if best is None or (v < best if minimize else v > best) else best
        line.append((t.number, best))
    return line


def _trained_study(study: optuna.Study) -> optuna.Study:
    """An in-memory copy holding only the trials that trained, so placeholders skew nothing."""
    copy = optuna.create_study(directions=study.directions)
    copy.add_trials(trained_trials(study))
    return copy


def _importances(study: optuna.Study, name: str) -> list:
    vis, trained = _visualization(), _trained_study(study)
    targets = [(lambda t: t.values[0], name)]
    # Null where no training step was timed (max_steps 1: the profiled step only): nothing to rank then.
    if all(t.user_attrs.get(RecordKey.TRAIN_SAMPLES_PER_S) is not None for t in trained.trials):
        targets.append((lambda t: t.user_attrs[RecordKey.TRAIN_SAMPLES_PER_S], "train_samples_per_s"))
    figures = []
    for target, target_name in targets:
        try:
            # fANOVA: variance-based, so it reads "higher is better" throughput as well as a loss.
            evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
            fig = vis.plot_param_importances(trained, evaluator=evaluator, target=target, target_name=target_name)
        except (ValueError, RuntimeError):  # fewer than two trained trials, or no searched param varied
            continue
        fig.update_layout(title=f"Parameter importances for {target_name}")
        figures.append(fig)
    return figures


def _figures(study: optuna.Study) -> list[str]:
    vis = _visualization()
    names = study.metric_names or [f"objective {i}" for i in range(len(study.directions))]
    plots = [_history(study, name, i) for i, name in enumerate(names)]
    plots += _importances(study, names[0])
    if len(names) > 1 and len(trained_trials(study)) > 0:
        plots.append(vis.plot_pareto_front(_trained_study(study), target_names=names))
    return [fig.to_html(full_html=False, include_plotlyjs=False) for fig in plots]


def _plotly_js() -> str:
    """plotly.js, inlined once so the page needs no network. Never masked: masking reads code as
    text, and a minified name such as `relinkPrivateKeys=...` looks like a key's value to it."""
    from plotly.offline import get_plotlyjs

    return f'<script type="text/javascript">{get_plotlyjs()}</script>'


def _effects_html(study: optuna.Study, metric: str) -> str:
    effects = knob_effects(study.get_trials(deepcopy=False))
    if not effects:
        return "<p>No knob took more than one value in this study.</p>"
    rows = ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells(e)) + "</tr>" for e in effects]
    return _table(header(metric), rows)


def _table(head, rows: list[str]) -> str:
    return "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>"


def _best_html(study: optuna.Study) -> str:
    try:
        best = best_trials(study)[0]  # the trial `hpo best` shows first
    except UserInputError:
        return "<p>No trial has trained normally yet.</p>"
    config = yaml.safe_dump(best.user_attrs.get(RecordKey.CONFIG, {}), sort_keys=False)
    command = f"hpo export --study {study.study_name} --trial {best.number} -o best.yaml && hpo train best.yaml"
    return f"<p>Trial {best.number}. Retrain it with:</p><pre>{html.escape(command)}</pre><pre>{html.escape(config)}</pre>"


def _trial_rows(study: optuna.Study) -> str:
    rows = []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        requested = a.get("knobs_requested") or {}
        knob_cells = "".join(_knob_cell(requested.get(k), observed_knob(a, k)) for k in KNOB_NAMES)
        values = "" if t.values is None or not Verdict.parse(a.get("verdict")).ok else ", ".join(f"{v:.4g}" for v in t.values)
        speed, wait = a.get("train_samples_per_s"), a.get(RecordKey.DATA_WAIT_SHARE)
        cells = (t.number, t.state.name, a.get("verdict", ""), values)
        rows.append(
            "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + knob_cells
            + f"<td>{'' if speed is None else f'{speed:.1f}'}</td><td>{'' if wait is None else f'{wait:.0%}'}</td></tr>"
        )  # fmt: skip
    return _table(("trial", "state", "verdict", "values", *KNOB_NAMES, "samples/s", "data wait"), rows)


def _knob_cell(requested, observed: str) -> str:
    """The requested value, and where the evidence shows otherwise (or nothing), what it shows."""
    text = html.escape(str("" if requested is None else requested))
    if observed != str(requested):
        text += f" &rarr; {html.escape(observed)}"
    return f"<td>{text}</td>"


def _section(title: str, body: str) -> str:
    return f"<h2>{html.escape(title)}</h2>{body}"


def write_report(study: optuna.Study, path: Path) -> None:
    """Write the report atomically: a reader never sees half a file."""
    title = f"hpo study {study.study_name}"
    metric = (study.metric_names or ["objective 0"])[0]
    body = "\n".join(_figures(study))
    # Everything drawn from the study is masked (a verdict or config may quote a URL); the library is not.
    content = mask_secrets(
        f"<h1>{html.escape(title)}</h1>{body}"
        + _section("What each knob did", _effects_html(study, metric))
        + _section("Best trial", _best_html(study))
        + _section("Trials", _trial_rows(study))
    )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{STYLE}</style>"
        f"{_plotly_js()}</head><body>{content}</body></html>"
    )
    write_atomic(path, page)
