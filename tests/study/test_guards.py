"""Guards while training: divergence, fp16 scaler collapse, out of memory, a knob that ran otherwise.
And the verdict cache: a second trial with the same knobs skips the probe."""

from __future__ import annotations

import contextlib
import time

import pytest
import torch
from conftest import toy_config

from hpo.config.trial import Knobs
from hpo.engine import AssembledModel
from hpo.errors import TrialError, TrialRejected
from hpo.trial import execute
from hpo.trial._trainer import train
from hpo.verify.stored import MemoryVerdicts, verdict_key
from hpo.workloads.catalog import create_workload

CPU = torch.device("cpu")


def train_config(config):
    assembled = AssembledModel(create_workload(config.workload, config.workload_options), config.knobs, config.training, CPU)
    return train(assembled, config)


def test_nan_loss_stops_the_trial_as_diverged_at_its_step():
    outcome = execute(toy_config(max_steps=8, nan_at_step=4), MemoryVerdicts())
    assert str(outcome.verdict) == "diverged: step 4: loss is nan"
    assert outcome.values is None


def test_fp16_scaler_collapse_stops_training():
    config = toy_config(
        Knobs(precision="fp16", attention="eager", optimizer="fused"), max_steps=60, eval_every=60, loss_scale=1e30
    )
    with pytest.raises(TrialRejected, match=r"^diverged: step \d+: fp16 GradScaler scale collapsed"):
        train_config(config)


def test_out_of_memory_is_recorded_and_the_next_trial_runs(monkeypatch):
    from toy_workloads import Toy

    real_loss = Toy.training_loss
    calls = {"n": 0}

    def allocation_fails_on_third_step(self, model, batch):
        calls["n"] += 1
        if calls["n"] == 3 and model.training:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real_loss(self, model, batch)

    verdicts = MemoryVerdicts()
    config = toy_config()
    execute(config, verdicts)  # caches the verdict so the failing call lands in training
    calls["n"] = 0
    monkeypatch.setattr(Toy, "training_loss", allocation_fails_on_third_step)
    outcome = execute(config, verdicts)
    assert str(outcome.verdict) == "oom: OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB"
    monkeypatch.setattr(Toy, "training_loss", real_loss)
    assert execute(config, verdicts).ok


def test_cpu_memory_error_is_recorded_as_oom(monkeypatch):
    import hpo.trial._executor as executor

    def no_memory(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(executor, "AssembledModel", no_memory)
    verdicts = MemoryVerdicts()
    config = toy_config()
    key, _ = verdict_key(config, CPU)
    verdicts.put(key, {"verdict": "ok"})
    assert str(execute(config, verdicts).verdict) == "oom: MemoryError"


def test_training_that_ran_other_knobs_than_asked_is_not_ok(monkeypatch):
    from hpo.knobs.precision_plugins import MixedPrecision

    config = toy_config(Knobs(precision="bf16", attention="sdpa", optimizer="fused"))
    verdicts = MemoryVerdicts()
    key, _ = verdict_key(config, CPU)
    verdicts.put(key, {"verdict": "ok"})  # the probe passed earlier; now autocast silently stops working
    monkeypatch.setattr(MixedPrecision, "forward_context", lambda self: contextlib.nullcontext())
    outcome = execute(config, verdicts)
    assert str(outcome.verdict) == "mismatch: precision: asked bf16, ran fp32"
    assert outcome.attrs["knobs_observed"]["precision"] == "fp32"


def test_knobs_observed_come_from_the_run_and_match_when_ok():
    knobs = Knobs(precision="bf16", attention="sdpa_math", optimizer="foreach", grad_checkpointing=True)
    outcome = execute(toy_config(knobs), MemoryVerdicts())
    assert outcome.ok, str(outcome.verdict)
    observed = outcome.attrs["knobs_observed"]
    assert observed["precision"] == "bf16" and observed["attention"] == "sdpa_math"
    assert observed["optimizer"] == "foreach" and observed["grad_checkpointing"] is True
    assert observed["compile"] is False and observed["grad_scaler"] is False
    for key in ("train_samples_per_s", "step_time_ms", "peak_mem_mb", "n_params"):
        assert outcome.attrs[key] > 0


def test_cached_verdict_skips_the_probe_and_costs_almost_nothing():
    verdicts = MemoryVerdicts()
    config = toy_config(Knobs(precision="fp16", attention="eager", optimizer="fused"), overflow=1e5)
    first = execute(config, verdicts)
    assert str(first.verdict).startswith("incompatible: non-finite") and first.attrs["probe_cached"] is False
    start = time.perf_counter()
    second = execute(config, verdicts)
    elapsed = time.perf_counter() - start
    assert str(second.verdict) == str(first.verdict) and second.attrs["probe_cached"] is True
    assert elapsed < 0.5 * first.attrs["probe_s"], (elapsed, first.attrs["probe_s"])


def test_verdict_key_changes_with_knobs_and_model_but_not_with_lr():
    base = toy_config()
    key, facts = verdict_key(base, CPU)
    assert facts["device"].startswith("cpu") and facts["versions"]["torch"] == torch.__version__
    assert verdict_key(toy_config(Knobs(precision="bf16", attention="eager", optimizer="forloop")), CPU)[0] != key
    assert verdict_key(toy_config(d_model=64), CPU)[0] != key
    lr_changed = type(base)(**{**base.__dict__, "training": type(base.training)(**{**base.training.__dict__, "lr": 0.5})})
    assert verdict_key(lr_changed, CPU)[0] == key


def test_compiled_frames_past_the_recompile_limit_fail_instead_of_running_eagerly(monkeypatch):
    """Dynamo's own fallback past its recompile limit would run uncompiled under a compiled label."""
    import hpo.knobs.compiled_graphs as compiled_graphs

    monkeypatch.setattr(compiled_graphs, "RECOMPILE_LIMIT", 1)
    config = toy_config(Knobs(compile="default", optimizer="fused"), max_steps=4, eval_every=2)
    verdicts = MemoryVerdicts()
    key, _ = verdict_key(config, CPU)
    verdicts.put(key, {"verdict": "ok"})
    with pytest.raises(TrialError) as raised:  # evaluation (no_grad) then training again forces a recompile
        execute(config, verdicts)
    assert str(raised.value.verdict).startswith("error: "), str(raised.value.verdict)
    assert "recompile" in raised.value.attrs["error_traceback"].lower()
    monkeypatch.setattr(compiled_graphs, "RECOMPILE_LIMIT", 64)
    assert execute(config, verdicts).ok
