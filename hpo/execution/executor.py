"""Run one trial config: verify its knobs (probe or cached verdict), train, and say what ran.

Used by the Optuna objective and by `hpo train`; it knows nothing about Optuna.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field

import torch

from hpo import __version__
from hpo.config import TrialConfig
from hpo.errors import PrunedByPruner, TrialRejected
from hpo.execution.assembly import AssembledModel
from hpo.execution.trainer import EvalCallback, train
from hpo.hardware.probes import device_model
from hpo.hardware.runtime import resolve_device, seed_everything, trial_runtime
from hpo.verify.cache import VerdictStore, verdict_key
from hpo.verify.classify import classify_failure
from hpo.verify.probe import ProbeResult, run_probe
from hpo.workloads.registry import create_workload


@dataclass
class TrialOutcome:
    """`verdict` is `ok` or the reason the trial did not train normally; `values` only when ok."""

    verdict: str
    values: list[float] | None
    attrs: dict = field(default_factory=dict)
    pruned: bool = False

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"


def execute(config: TrialConfig, verdicts: VerdictStore, on_eval: EvalCallback | None = None) -> TrialOutcome:
    device = resolve_device(config.device)
    attrs = {
        "config": config.to_dict(),
        "knobs_requested": config.knobs.as_dict(),
        "device": device_model(device),
        "torch_version": torch.__version__,
        "hpo_version": __version__,
    }
    key, facts = verdict_key(config, device)
    attrs["verdict_key"] = key
    cached = verdicts.get(key)
    if cached is not None and cached["verdict"] != "ok":
        attrs.update(probe_s=0.0, probe_cached=True, probe_slowdown=cached.get("slowdown"),
                     knobs_observed=cached.get("observed", {}))
        return TrialOutcome(verdict=cached["verdict"], values=None, attrs=attrs)
    start = time.perf_counter()
    with trial_runtime(device) as runtime:
        attrs["runtime"] = runtime
        return _verify_and_train(config, device, verdicts, (key, facts), cached, attrs, on_eval, start)


def _verify_and_train(config, device, verdicts, keyed, cached, attrs, on_eval, start) -> TrialOutcome:
    key, facts = keyed
    assembled = None
    try:
        workload = create_workload(config.workload, config.workload_options)
        if cached is None:
            probe = run_probe(workload, config, device)
            verdicts.put(key, {**probe.record(), "knobs": facts["knobs"], "device": facts["device"]})
            attrs.update(_probe_attrs(probe))
            if not probe.ok:
                attrs["knobs_observed"] = probe.observed
                return TrialOutcome(verdict=probe.verdict, values=None, attrs=attrs)
        else:
            attrs.update(probe_s=0.0, probe_cached=True, probe_slowdown=cached.get("slowdown"))
        seed_everything(config.seed)
        assembled = AssembledModel(workload, config.knobs, config.training, device)
        result = train(assembled, config, on_eval)
    except TrialRejected as exc:
        attrs["knobs_observed"] = exc.observed or attrs.get("knobs_observed", {})
        return TrialOutcome(verdict=exc.verdict, values=None, attrs=attrs)
    except PrunedByPruner as exc:
        return TrialOutcome(verdict=f"pruned: step {exc.step}", values=None, attrs=attrs, pruned=True)
    except (torch.OutOfMemoryError, MemoryError) as exc:
        detail = str(exc).splitlines()[0][:200] if str(exc) else ""
        return TrialOutcome(verdict=f"oom: {type(exc).__name__}: {detail}".rstrip(": "), values=None, attrs=attrs)
    except Exception as exc:  # noqa: BLE001 - recorded on the trial, with the knob it points at
        return TrialOutcome(verdict="error: " + classify_failure(exc, config.knobs).removeprefix("incompatible: "),
                            values=None, attrs=attrs)
    finally:
        del assembled
        _free_memory(device)
    attrs.update(
        knobs_observed=result.knobs_observed,
        train_samples_per_s=result.train_samples_per_s,
        step_time_ms=result.step_time_ms,
        peak_mem_mb=result.peak_mem_mb,
        n_params=result.n_params,
        metrics=result.metrics,
        trial_s=time.perf_counter() - start,
    )
    return TrialOutcome(verdict="ok", values=[result.metrics[name] for name in config.objectives], attrs=attrs)


def _probe_attrs(probe: ProbeResult) -> dict:
    return {
        "probe_s": probe.probe_s,
        "probe_cached": False,
        "probe_slowdown": probe.slowdown,
        "probe_loss_rel_err": probe.loss_rel_err,
        "probe_grad_rel_err": probe.grad_rel_err,
    }


def _free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
