"""Turn what was seen during one training step into `knobs_observed`, and compare it with the request.

Sources: the dtypes reaching matmul kernels (dispatcher, or compiled graphs' metadata), the aten ops
in torch.profiler (attention kernel, optimizer path), block forward counts (recomputation), the
graphs the compile backend received, and each knob's setting read inside the step. Each knob's module
(`hpo.knobs.systems`) reads its own part; nothing here reads the requested knobs to decide what ran.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hpo.config.trial import Knobs, LoaderSettings
from hpo.knobs.compiled_graphs import GraphRecord
from hpo.knobs.knob import Mismatch
from hpo.knobs.systems import LOADER_KNOBS, TRIAL_KNOBS
from hpo.records import KnobsObserved
from hpo.verdicts import Kind, Verdict

__all__ = ["Mismatch", "StepEvidence", "loader_mismatches", "mismatch_verdict", "mismatches", "observed_knobs"]


@dataclass
class StepEvidence:
    matmul_dtypes: Counter = field(default_factory=Counter)  # linear/conv layers
    attention_dtypes: Counter = field(default_factory=Counter)  # attention's own matmuls
    profiler_ops: set[str] = field(default_factory=set)
    optimizer_ops: set[str] = field(default_factory=set)  # ops inside Optimizer.step only
    recompute_in_step: int = 0
    graphs: GraphRecord = field(default_factory=GraphRecord)
    optimizer_module: str = ""
    grad_scaler_scale: float | None = None
    in_step: dict[str, Any] = field(default_factory=dict)  # each knob's setting, read inside the step


def observed_knobs(ev: StepEvidence) -> dict:
    """The trial's `knobs_observed` record (`hpo.records.KnobsObserved`)."""
    fields: dict[str, Any] = {}
    for knob in TRIAL_KNOBS.values():
        fields.update(knob.observe(ev))
    return KnobsObserved(**fields).model_dump()


def mismatches(requested: Knobs, observed: dict) -> list[Mismatch]:
    """Each knob that the evidence shows did not run as requested."""
    asked = requested.as_dict()
    return [m for name, knob in TRIAL_KNOBS.items() for m in knob.mismatches(asked[name], observed, requested)]


def loader_mismatches(requested: LoaderSettings, loader_observed: dict) -> list[Mismatch]:
    """Each loader setting that what delivered the batches contradicts (`pin_memory` against `pinned`)."""
    asked = requested.as_dict()
    return [m for name, knob in LOADER_KNOBS.items() for m in knob.loader_mismatches(asked[name], loader_observed)]


def mismatch_verdict(kind: Kind, found: list[Mismatch], requested: Any, prefix: str = "") -> Verdict:
    """The verdict for knobs that ran as something else; it implicates the knobs each mismatch blames."""
    asked = requested.as_dict()
    owners = {**TRIAL_KNOBS, **LOADER_KNOBS}
    implicated: dict[str, Any] = {}
    for m in found:
        owner = owners.get(m.knob) or next(k for k in owners.values() if m.knob in k.observed_fields)
        implicated.update(owner.implicated(m, asked))
    return Verdict.make(kind, prefix + "; ".join(str(m) for m in found), implicated.items())
