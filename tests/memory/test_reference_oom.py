"""A reference that does not fit at the trial's batch is no verdict on the trial's knobs. The probe
times the fp32/eager reference at the trial's batch; on the H200 a bf16 trial at batch 256 of a
152.7M GPT ended `oom` by the reference's 125 GB before its own memory was ever predicted."""

from __future__ import annotations

import torch

from hpo.config.trial import Knobs, TrainingConfig, TrialConfig
from hpo.records import RecordKey
from hpo.trial import execute
from hpo.verify.probing import _speed as probe  # where the probe times its reference
from hpo.verify.stored import MemoryVerdicts, reference_key

OOM = "CUDA out of memory. Tried to allocate 16.00 GiB. GPU 0 has a total capacity of 139.80 GiB"


def _config() -> TrialConfig:
    return TrialConfig(
        workload="toy_workloads:Toy",
        workload_options={"d_model": 16, "seq_len": 8, "n_blocks": 2},
        training=TrainingConfig(batch_size=16, max_steps=3, eval_every=3),
        knobs=Knobs(attention="sdpa", optimizer="foreach"),
        skip_slow=False,
    )


def test_the_trial_trains_with_its_speed_not_judged_and_says_why(monkeypatch):
    def reference_out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError(OOM)

    monkeypatch.setattr(probe, "time_reference", reference_out_of_memory)
    store = MemoryVerdicts()
    outcome = execute(_config(), store)
    assert outcome.verdict.ok, outcome.verdict
    why = outcome.attrs[RecordKey.SLOW_NOT_JUDGED]
    assert why.startswith("the fp32/eager reference does not fit at batch 16 (CUDA out of memory. Tried to allocate 16.00 GiB")
    assert outcome.attrs[RecordKey.SLOWDOWN] is None
    assert store.get(reference_key(_config(), torch.device("cpu"))) is None  # no reference speed was made up


def test_an_out_of_memory_of_the_trials_own_step_still_ends_it_oom(monkeypatch):
    from hpo.engine import AssembledModel

    real = AssembledModel.forward_backward

    def trial_out_of_memory(self, batch):
        if self.knobs.attention == "sdpa":  # the trial's model, not the eager reference
            raise torch.OutOfMemoryError(OOM)
        return real(self, batch)

    monkeypatch.setattr(AssembledModel, "forward_backward", trial_out_of_memory)
    outcome = execute(_config(), MemoryVerdicts())
    assert str(outcome.verdict).startswith("oom"), outcome.verdict
