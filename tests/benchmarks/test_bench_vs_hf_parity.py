"""The causal_lm task of scripts/bench-vs-hf trains the same thing on both sides: the Trainer, given
hpo's batch order (sequential sampling) and hpo's weight decay on every parameter, reaches the same
val_loss as an hpo trial at the same lr. What is left between the sides in the benchmark is then only
those two Trainer defaults (PARITY.md measures them); a change to hpo's initial weights, lr schedule,
clipping, optimizer or evaluation breaks this."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from benchmarks import vs_hf_trainer
from benchmarks.vs_hf_task import SearchTask
from hpo.config.trial import Knobs, TrainingConfig, TrialConfig
from hpo.trial import execute
from hpo.verify.stored import MemoryVerdicts

LR = 0.0029  # the top of the benchmark's range, where the sides looked furthest apart


def _task(steps: int) -> SearchTask:
    return SearchTask(workload="causal_lm", steps=steps, trials=1)


def _hpo_val_loss(task: SearchTask) -> float:
    training = TrainingConfig(
        max_steps=task.steps,
        eval_every=task.steps,
        lr=LR,
        batch_size=task.batch_size,
        weight_decay=task.weight_decay,
        warmup_steps=task.spec.warmup_steps,
    )
    knobs = Knobs(precision="fp32", attention="sdpa", optimizer="fused", grad_checkpointing=False, compile=False)
    config = TrialConfig(
        workload="causal_lm", workload_options=task.options(), training=training, knobs=knobs, seed=task.seed, device="cpu"
    )
    outcome = execute(config, MemoryVerdicts())
    assert outcome.ok, outcome.verdict
    return outcome.attrs["metrics"]["val_loss"]


class DecayEverywhere(vs_hf_trainer.Trainer):
    """hpo's AdamW decays every parameter; the Trainer's default leaves out biases and LayerNorms."""

    def get_decay_parameter_names(self, model: torch.nn.Module) -> list[str]:
        return [name for name, _ in model.named_parameters()]


def _trainer_val_loss(task: SearchTask, tmp_path) -> float:
    model_init, train, evaluation = vs_hf_trainer._causal_lm(task, vs_hf_trainer.TrialClock())
    args = dataclasses.replace(vs_hf_trainer._arguments(task, tmp_path), learning_rate=LR, train_sampling_strategy="sequential")
    trainer = DecayEverywhere(model_init=model_init, args=args, train_dataset=train, eval_dataset=evaluation)
    trainer.train()
    return trainer.evaluate()["eval_loss"]


@pytest.mark.slow
def test_trainer_with_hpos_batch_order_and_decay_matches_an_hpo_trial(tmp_path):
    task = _task(steps=4)
    hpo, trainer = _hpo_val_loss(task), _trainer_val_loss(task, tmp_path)
    assert trainer == pytest.approx(hpo, abs=1e-5), (trainer, hpo)
