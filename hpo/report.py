"""`hpo report`: a self-contained HTML page with the study's plots and a table of every trial's
verdict and knobs, requested and observed."""

from __future__ import annotations

import html
from pathlib import Path

import optuna

from hpo.errors import UserInputError
from hpo.storage.urls import mask_password

KNOBS = ("precision", "attention", "optimizer", "grad_checkpointing", "compile")


def _figures(study: optuna.Study) -> list[str]:
    try:
        from optuna import visualization as vis
    except ImportError:
        raise UserInputError("hpo report needs plotly: pip install 'hpo[dashboard]'") from None
    if not vis.is_available():
        raise UserInputError("hpo report needs plotly: pip install 'hpo[dashboard]'")
    plots = []
    names = study.metric_names or [f"objective {i}" for i in range(len(study.directions))]
    for index, name in enumerate(names):
        target = (lambda t, i=index: t.values[i]) if len(names) > 1 else None
        plots.append(vis.plot_optimization_history(study, target=target, target_name=name))
        plots.append(vis.plot_parallel_coordinate(study, target=target, target_name=name))
    if len(names) > 1:
        plots.append(vis.plot_pareto_front(study, target_names=names))
    return [fig.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, fig in enumerate(plots)]


def _trial_rows(study: optuna.Study) -> str:
    rows = []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        requested, observed = a.get("knobs_requested", {}), a.get("knobs_observed", {})
        knob_cells = "".join(
            f"<td>{html.escape(str(requested.get(k, '')))}"
            + ("" if observed.get(k, requested.get(k)) == requested.get(k) else f" &rarr; {html.escape(str(observed.get(k)))}")
            + "</td>"
            for k in KNOBS
        )
        values = "" if t.values is None or a.get("verdict") != "ok" else ", ".join(f"{v:.4g}" for v in t.values)
        speed = a.get("train_samples_per_s")
        rows.append(
            f"<tr><td>{t.number}</td><td>{t.state.name}</td><td>{html.escape(str(a.get('verdict', '')))}</td>"
            f"<td>{values}</td>{knob_cells}<td>{'' if speed is None else f'{speed:.1f}'}</td></tr>"
        )
    header = "".join(f"<th>{h}</th>" for h in ("trial", "state", "verdict", "values", *KNOBS, "samples/s"))
    return f"<table><tr>{header}</tr>{''.join(rows)}</table>"


def write_report(study: optuna.Study, path: Path) -> None:
    title = f"hpo study {study.study_name}"
    body = "\n".join(_figures(study))
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}</style>"
        f"</head><body><h1>{html.escape(title)}</h1>{body}<h2>Trials</h2>{_trial_rows(study)}</body></html>"
    )
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(mask_password(page))
    tmp.replace(path)
