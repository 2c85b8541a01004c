"""`hpo probe` with a memory limit: each verified combination's row holds the peak its model
predicts at the study's batch and the largest batch that fits, from the fit a trial would read
(kept in the verdict store, read again instead of refitted, grown only for a larger batch); without a limit nothing is fitted and
the columns are absent."""

from __future__ import annotations

import pytest

from hpo.app.output import knob_row_json
from hpo.config.params import AutoBatch
from hpo.config.space import parse_space
from hpo.hardware import GB, PeakModel
from hpo.strategy import _memory_fit as sweep_memory
from hpo.strategy import sweep, table
from hpo.trial._memory_limit import AUTO_HEADROOM, memory_key
from hpo.verify.fault import REFERENCE_KNOBS
from hpo.verify.peaks import _peak_fit as peak_fit
from hpo.verify.peaks import auto_batch_fitting
from hpo.verify.stored import MemoryVerdicts

MB = 2**20
CEILING = 32
SPACE = {
    "study": {"name": "probe-memory", "pruner": {"name": "none"}, "skip_slow": False},
    # Eight blocks at sequence length 64: a few MB of activations a sample on the CPU meter, so
    # the slope stands above its noise.
    "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2, "seq_len": 64, "n_blocks": 8},
    "params": {"lr": 1.0e-3, "batch_size": {"low": 8, "high": CEILING, "step": 8}},  # probed at 24
    "systems": {"precision": "fp32", "attention": "eager", "optimizer": "forloop", "compile_backend": "eager"},
}


def _space(limit_gb: float | None, batch_size=None):
    study = {**SPACE["study"], "memory_limit_gb": limit_gb}
    params = {**SPACE["params"], **({"batch_size": batch_size} if batch_size is not None else {})}
    return parse_space({**SPACE, "study": study, "params": params}, source="test")


def _fitted(store: MemoryVerdicts) -> dict[str, PeakModel]:
    return {k: PeakModel.from_record(r) for k, r in store.records.items() if k.endswith("-memory")}


def _refuse_to_fit(monkeypatch, but_the_reference: bool = False) -> None:
    """Any fit step raises; `but_the_reference`: except the fp32/eager reference's, which a probe
    under a limit fits once per model before timing it (`hpo.verify.peaks._reference_fit`)."""
    step_peak = peak_fit._step_peak

    def refuse(model, *args, **kwargs):
        if but_the_reference and model.knobs == REFERENCE_KNOBS:
            return step_peak(model, *args, **kwargs)
        raise AssertionError("the peak model was fitted again")

    monkeypatch.setattr(peak_fit, "_step_peak", refuse)


def test_without_a_limit_nothing_is_fitted_and_the_columns_are_absent(monkeypatch):
    _refuse_to_fit(monkeypatch)
    store = MemoryVerdicts()
    (row,) = sweep(_space(None), store)
    assert row.verdict == "ok"
    assert row.predicted_peak_mb is None and row.largest_batch is None and not _fitted(store)
    assert "max batch" not in table([row]) and "pred MB" not in table([row])
    assert knob_row_json(vars(row))["largest_batch"] is None


@pytest.fixture(scope="module")
def first_sweep():
    """A limit far above the toy model: every batch of the space fits."""
    store = MemoryVerdicts()
    (row,) = sweep(_space(64.0), store)
    return store, row


def test_a_row_holds_the_prediction_at_the_studys_batch_and_the_largest_fitting_batch(first_sweep):
    store, row = first_sweep
    assert row.verdict == "ok"
    ((key, peaks),) = _fitted(store).items()  # one combination, one fit, under its memory key
    assert key == memory_key(key.removesuffix("-memory")) and store.get(key.removesuffix("-memory"))["verdict"] == "ok"
    assert peaks.per_sample_bytes > 0, peaks
    assert row.predicted_peak_mb == pytest.approx(peaks.predict(24) / MB)
    assert row.largest_batch == peaks.largest_fitting(64 * GB, CEILING) == CEILING
    lines = table([row]).splitlines()
    assert "pred MB" in lines[0] and "max batch" in lines[0]
    assert f"{row.predicted_peak_mb:.0f}" in lines[1].split() and str(CEILING) in lines[1].split()
    shown = knob_row_json(vars(row))
    assert shown["predicted_peak_mb"] == row.predicted_peak_mb and shown["largest_batch"] == CEILING


def test_a_tighter_limit_reads_the_kept_fit_and_finds_a_smaller_batch(first_sweep, monkeypatch):
    store, _ = first_sweep
    ((_, peaks),) = _fitted(store).items()
    limit_gb = peaks.predict(12.5) / GB  # between batches 12 and 13
    _refuse_to_fit(monkeypatch)
    (row,) = sweep(_space(limit_gb), store)
    assert row.largest_batch == peaks.largest_fitting(int(limit_gb * GB), CEILING) == 12
    assert row.predicted_peak_mb == pytest.approx(peaks.predict(24) / MB)  # over the limit: a trial at 24 is rejected


def test_with_batch_size_auto_the_row_predicts_at_the_batch_a_trial_would_choose(first_sweep, monkeypatch):
    store, _ = first_sweep
    ((_, peaks),) = _fitted(store).items()
    limit_gb = peaks.predict(21.5) / (1 - AUTO_HEADROOM) / GB  # chosen within the headroom: 20, a multiple of 4
    _refuse_to_fit(monkeypatch)
    # A max of 24, as the fixture's batch: the kept fit (grown towards half of it, 12, so up to 8) needs no growth.
    auto = AutoBatch(max=24, multiple_of=4)
    (row,) = sweep(_space(limit_gb, batch_size={"auto": {"max": 24, "multiple_of": 4}}), store)
    chosen = auto_batch_fitting(peaks, int(limit_gb * GB), auto)
    assert chosen == 20
    assert row.largest_batch == chosen and row.predicted_peak_mb == pytest.approx(peaks.predict(chosen) / MB)


def test_the_ceiling_is_the_largest_batch_the_space_can_train_at():
    config = None  # read only when the space has no batch_size
    assert sweep_memory.batch_ceiling(_space(1.0), config) == CEILING
    assert sweep_memory.batch_ceiling(_space(1.0, batch_size=[16, 48, 8]), config) == 48
    assert sweep_memory.batch_ceiling(_space(1.0, batch_size=40), config) == 40
    assert sweep_memory.batch_ceiling(_space(1.0, batch_size={"auto": {"max": 96}}), config) == 96


def test_probe_firsts_sweep_leaves_the_fit_to_the_trials_that_train(monkeypatch, tmp_path):
    # Under a limit (CUDA always has one) the fit costs three small steps a combination: the opening
    # sweep of probe_first, whose share of the study is what issue 38 shrinks, does not pay them.
    import optuna

    from hpo.strategy import _probe_first as probe_first

    _refuse_to_fit(monkeypatch, but_the_reference=True)  # fitted once per model, before it is timed
    store = MemoryVerdicts()
    (row,) = sweep(_space(64.0), store, memory=False)
    assert row.verdict == "ok" and row.predicted_peak_mb is None and not _fitted(store)
    study = optuna.create_study(study_name="pf-memory", storage=f"sqlite:///{tmp_path / 'pf.db'}")
    monkeypatch.setenv("HPO_MACHINE_FACTS", str(tmp_path / "facts"))
    decided = probe_first._sweep_and_store(study, _space(64.0), 0, say=lambda line: None)  # refits would raise
    assert [k["knobs"]["precision"] for k in decided["kept"]] == ["fp32"]


@pytest.mark.parametrize(
    ("raised", "caught"),
    [
        (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 268435456 bytes"), True),
        (RuntimeError("an error of the workload's own"), False),
    ],
)
def test_the_cpu_allocators_refusal_under_the_cap_ends_the_fit_not_the_sweep(monkeypatch, raised, caught):
    """Fault: the fit's step fails as torch's CPU allocator does under hpo's memory cap. The row gets
    no memory columns (a warning says why); any other error is the row's error, as before."""

    def refused(*args, **kwargs):
        raise raised

    monkeypatch.setattr(sweep_memory, "fitted_peaks", refused)
    (row,) = sweep(_space(limit_gb=1.0), MemoryVerdicts())
    if caught:
        assert row.verdict == "ok" and row.predicted_peak_mb is None and row.largest_batch is None
    else:  # an error of the combination's row, with its traceback logged: never read as out of memory
        assert row.verdict.startswith("error: RuntimeError: an error of the workload's own"), row.verdict
