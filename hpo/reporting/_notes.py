"""optuna-dashboard notes: every finished trial gets one, and the study's note holds the knob-effect
table, refreshed on a schedule that thins out as the study grows (`study_note_due`).

Notes live in the study's system attrs (optuna-dashboard's format). `optuna_dashboard.save_note`
reads all of the study's system attrs on every write, to find the note's version and clear old
chunks; that read grows with the study. A finished trial's note is its first and only one, so it is
written directly at version 1 with no read. The study note goes through `save_note` and reads every
trial, but only when `study_note_due`, which keeps its cost per trial flat as the study grows.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import optuna
from optuna.trial import FrozenTrial

from hpo import deps
from hpo.errors import UserInputError
from hpo.knobs.registry import KNOB_NAMES
from hpo.logging import get_logger
from hpo.masking import mask_secrets
from hpo.records import RecordKey
from hpo.reporting._knob_display import observed_knob
from hpo.reporting._knob_effects import knob_effects, markdown_table
from hpo.reporting._machines import not_runnable_note
from hpo.reporting._sweep_decision import KEPT_ATTR, decision_note
from hpo.storage import storage_of, study_id_of, trial_id_of
from hpo.verdicts import Verdict

__all__ = ["STUDY_NOTE_EVERY", "DashboardNotes", "study_note", "study_note_due", "trial_note"]

_log = get_logger(__name__)

# The study note is rewritten after trial 10, 20, ..., 100, then every 100 trials up to 1,000, every
# 1,000 up to 10,000, and so on (and once by each worker as it finishes). One update reads every
# trial, so its cost grows with the study; spacing the updates in proportion keeps the cost per
# trial flat (updating every 10 trials cost a large share of a short trial at 1,000 trials:
# docs/benchmarks/notes-cost.md).
STUDY_NOTE_EVERY = 10


def study_note_due(finished: int) -> bool:
    """Whether the study note is due after the `finished`-th trial (1-based)."""
    step = max(STUDY_NOTE_EVERY, 10 ** (len(str(finished)) - 1))
    return finished % step == 0


ADVICE = {
    "incompatible": "this knob combination cannot run here; the sampler avoids the implicated values. "
    "`hpo doctor` lists what this machine supports.",
    "slow": "it runs, but slower than the study's slow_ratio allows; raise `study.slow_ratio` or set "
    "`study.skip_slow: false` to train it anyway.",
    "oom": "out of memory: try a smaller batch size, gradient checkpointing or bf16.",
    "diverged": "the loss went non-finite: try a lower learning rate, bf16 instead of fp16, or gradient clipping.",
    "mismatch": "the evidence shows a knob ran as something else than asked; the trial is not labelled with it.",
    "crashed": "the trial's process died; it is retried with the same parameters up to `study.max_retries`.",
    "timeout": "the trial ran longer than `study.trial_timeout_s` and was ended; it is retried with the same "
    "parameters up to `study.max_retries`. Raise the limit if the trial was merely slow.",
    "interrupted": "its worker was interrupted (Ctrl-C); it is retried with the same parameters.",
    "terminated": "its worker was stopped by SIGTERM; it is retried with the same parameters.",
    "error": "the trial raised an error; see the verdict for where it points.",
}


def _number(value, fmt: str) -> str:
    return "n/a" if not isinstance(value, (int, float)) or not math.isfinite(value) else fmt.format(value)


def trial_note(trial: FrozenTrial) -> str:
    """The trial's note in Markdown: verdict, knobs requested against observed, speed, memory, MFU."""
    attrs = trial.user_attrs
    verdict = str(attrs.get(RecordKey.VERDICT, trial.state.name.lower()))
    kind = Verdict.parse(verdict).kind.value
    lines = [f"## Trial {trial.number}: {kind}", "", f"**Verdict:** {verdict}", ""]
    requested = attrs.get(RecordKey.KNOBS_REQUESTED) or {}
    lines += ["| knob | requested | observed |", "| --- | --- | --- |"]
    lines += [f"| {k} | {requested.get(k, 'n/a')} | {observed_knob(attrs, k)} |" for k in KNOB_NAMES]
    lines += [
        "",
        f"- throughput: {_number(attrs.get(RecordKey.TRAIN_SAMPLES_PER_S), '{:.1f}')} samples/s",
        f"- data wait: {_number(attrs.get(RecordKey.DATA_WAIT_SHARE), '{:.0%}')} of training time blocked on the next batch",
        f"- step time: {_number(attrs.get(RecordKey.STEP_TIME_MS), '{:.1f}')} ms",
        f"- peak memory: {_number(attrs.get(RecordKey.PEAK_MEM_MB), '{:.0f}')} MB",
        f"- MFU: {_number(attrs.get(RecordKey.MFU), '{:.2%}')}",
    ]
    if kind != "ok" and kind in ADVICE:
        lines += ["", f"**Why and what to try:** {ADVICE[kind]}"]
    return "\n".join(lines)


def study_note(study: optuna.Study) -> str:
    trials = study.get_trials(deepcopy=False)
    metric = (study.metric_names or ["objective 0"])[0]
    effects = knob_effects(trials)
    table = markdown_table(effects, metric) if effects else "No knob took more than one value yet."
    schedule = "after trials 10, 20, ... 100, 200, ... 1,000, 2,000, ... and as each worker finishes"
    note = f"## What each knob did ({len(trials)} trials)\n\n{table}\n\nUpdated by hpo {schedule}."
    attrs = study.user_attrs
    decided = attrs.get(KEPT_ATTR)  # study.strategy probe_first: the sweep's table comes first
    sections = [decision_note(decided) if decided and not decided.get("error") else None, note, not_runnable_note(attrs)]
    return "\n\n".join(s for s in sections if s)


class DashboardNotes:
    """Optuna callback writing the notes. Without optuna-dashboard installed it writes none.

    Notes are best-effort: an error while writing one (the database is briefly unreachable, a
    lock times out) is logged once as a warning and the note is skipped; it never ends a worker."""

    def __init__(self, due: Callable[[int], bool] = study_note_due):
        self.due = due
        self._note = _note_module()
        self._warned = False

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if self._note is not None:
            self._best_effort(self._write_trial_note, study, trial)

    def update_study_note(self, study: optuna.Study) -> None:
        if self._note is not None:
            self._best_effort(lambda: self._note.save_note(study, study_note(study)))

    def _write_trial_note(self, study: optuna.Study, trial: FrozenTrial) -> None:
        storage, study_id, trial_id = storage_of(study), study_id_of(study), trial_id_of(trial)
        # A new trial has no note yet: write version 1 and its chunks without save_note's full read.
        storage.set_study_system_attr(study_id, self._note.note_ver_key(trial_id), 1)
        for key, chunk in self._note.split_body(trial_note(trial), trial_id).items():
            storage.set_study_system_attr(study_id, key, chunk)
        if self.due(trial.number + 1):
            self.update_study_note(study)

    def _best_effort(self, write: Callable[..., None], *args) -> None:
        try:
            write(*args)
        except Exception as exc:  # noqa: BLE001 - a note is decoration: nothing in it may stop the study
            if not self._warned:
                self._warned = True
                first = mask_secrets((str(exc).splitlines() or [""])[0][:200])
                _log.warning(
                    f"a dashboard note could not be written ({type(exc).__name__}: {first}); "
                    "the study goes on, some notes may be missing (this warning is shown once)"
                )


def _note_module():
    try:
        deps.optuna_dashboard()
    except UserInputError:  # not installed: notes are optional, the study is not
        return None
    from optuna_dashboard import _note  # the note format's own helpers, so hpo writes what it reads

    return _note
