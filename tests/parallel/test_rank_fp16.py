"""fp16 under ranks: DDP with autocast and GradScaler, FSDP2 with fp16 parameters gathered by its
mixed precision policy and the loss scaled by torch's ShardedGradScaler. Each shows what crossed
the wire and trains as one process does at the same global batch, within fp16's rounding."""

from __future__ import annotations

import multiprocessing
import warnings

import pytest
import torch
import torch.distributed as dist
from parallel_ranks import assembled_alone, no_rank_left_behind, one_process_losses, two_rank_config  # noqa: F401 (autouse)
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

from hpo.engine import AssembledModel, run_step
from hpo.errors import TrialRejected
from hpo.parallel import run_ranks
from hpo.parallel.group import joined_group
from hpo.parallel.sharded_scaling import check_loss_scaling, scale_sharded_loss
from hpo.parallel.wrap import knobs_on_rank, wrap_assembled
from hpo.workloads.catalog import create_workload

# fp16's unit roundoff, relative: one rounding of a value to fp16's 10 mantissa bits. The ranks
# compute what one process does but sum the gradients in another order and, under FSDP2, run the
# model on fp16 parameters where one process autocasts; measured after 4 steps on the quickstart
# model (2026-12-06), relative: DDP 4e-6, FSDP2 1e-5. The fp32 parity check's fault (GPT-2 trained on
# half of each global batch, tests/parallel_ranks.py) missed by 8e-3, 16x this bound.
FP16_RTOL = 2.0**-11


def _assert_fp16_parity(config, outcome) -> None:
    assert outcome.verdict.kind.value == "ok", str(outcome.verdict)
    ranks, alone = outcome.ranks[0]["losses"], one_process_losses(config)
    assert ranks == pytest.approx(alone, rel=FP16_RTOL)


@pytest.mark.slow
def test_ddp_fp16_autocasts_scales_the_loss_and_reduces_fp32_gradients():
    config = two_rank_config("ddp", precision="fp16")
    outcome = run_ranks(config, deadline_s=300)
    _assert_fp16_parity(config, outcome)
    record = outcome.record()
    # Autocast keeps fp32 parameters; their gradients (of the scaled loss) are all-reduced in fp32,
    # in one bucket for this model.
    assert record["param_dtypes_seen"] == ["float32"]
    assert record["reduce_dtypes_seen"] == ["float32"]
    assert record["wire"]["all_reduce"]["calls"] == 1


@pytest.mark.slow
def test_fsdp_fp16_gathers_fp16_parameters_and_agrees_on_overflow_over_the_ranks():
    config = two_rank_config("fsdp", precision="fp16", reshard_after_forward=False)
    outcome = run_ranks(config, deadline_s=300)
    _assert_fp16_parity(config, outcome)
    record = outcome.record()
    assert record["param_dtypes_seen"] == ["float16"]
    assert record["reduce_dtypes_seen"] == ["float32"]
    # The sharded scaler's one collective: its inf flag all-reduced over the group before the step.
    assert record["wire"]["all_reduce"] == {"calls": 1, "elements": [1], "dtypes": ["float32"]}


def _fp16_model(strategy: str = "fsdp"):
    config = two_rank_config(strategy, precision="fp16")
    return assembled_alone(config)


def test_fsdp_fp16_with_a_plain_grad_scaler_is_refused_naming_it():
    assembled = _fp16_model()  # one process: autocast and a plain GradScaler, as a one-process fp16 trial
    assert type(assembled.scaler) is torch.amp.GradScaler
    with pytest.raises(TrialRejected, match="needs torch's ShardedGradScaler.*scaler is GradScaler") as refused:
        check_loss_scaling(assembled, "fsdp", "fp16")
    assert refused.value.verdict.kind.value == "error"


def _gradients(assembled) -> list[torch.Tensor]:
    assembled.forward_backward(assembled.move(next(assembled.workload.train_batches(8, 0))))
    return [p.grad for p in assembled.model.parameters()]


def test_fsdp_fp16_scaling_scales_the_loss_by_the_sharded_scaler_outside_autocast():
    assembled = _fp16_model()
    scale_sharded_loss(assembled)
    check_loss_scaling(assembled, "fsdp", "fp16")
    assert isinstance(assembled.scaler, ShardedGradScaler)
    fp32 = two_rank_config("fsdp", precision="fp32")
    reference = assembled_alone(fp32)  # the same initial weights
    # The policy's parameters set the dtype: no autocast region (it would move these gradients by
    # fp16's rounding, ~1e-3), and the loss scaled by the sharded scaler's initial 2**16 (exact).
    for scaled, plain in zip(_gradients(assembled), _gradients(reference), strict=True):
        torch.testing.assert_close(scaled / 2.0**16, plain)


@pytest.mark.parametrize(("strategy", "precision"), [("ddp", "fp16"), ("fsdp", "bf16"), ("fsdp", "fp32")])
def test_loss_scaling_check_leaves_other_trials_alone(strategy, precision):
    check_loss_scaling(_fp16_model(strategy), strategy, precision)


# torch 2.13's warning on each unscale of FSDP2's gradients by the ShardedGradScaler
# (torch/distributed/tensor/_dispatch.py), which hpo ignores there.
DTENSOR_WARNING = "Found a non-scalar tensor with numel=1 and ndim!=0"


def _assembled_on_a_rank(config) -> AssembledModel:
    """The trial's model as each of its ranks assembles it before wrapping: its knobs as the rank
    applies them (under FSDP2 at fp32: the policy is the precision)."""
    workload = create_workload(config.workload, config.workload_options)
    workload.bind_training(config.training.params())
    torch.manual_seed(config.seed)  # the initial weights every rank (and assembled_alone) builds
    return AssembledModel(workload, knobs_on_rank(config.knobs, config.parallel), config.training, torch.device("cpu"))


def _sharded_fp16_steps(config, steps: int) -> list[str]:
    """The warnings raised while this process, as the one rank of its group, runs `steps` FSDP2
    fp16 steps of `config`, wrapped as a trial's rank wraps its model; each unscale also raises a
    warning of its own, which must pass through."""
    assembled = _assembled_on_a_rank(config)
    workload = assembled.workload
    wrap_assembled(assembled, config.parallel, config.knobs)
    unscale = assembled.scaler.unscale_

    def unscale_warning_too(optimizer):
        warnings.warn("another warning inside unscale", UserWarning, stacklevel=1)
        unscale(optimizer)

    assembled.scaler.unscale_ = unscale_warning_too
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # every occurrence, not once per place
        for step in range(steps):
            run_step(assembled, next(workload.train_batches(8, step)), step)
    return [str(warning.message) for warning in seen]


def _warnings_as_one_rank(steps: int) -> list[str]:
    """`_sharded_fp16_steps` in this process as the one rank of its group. Run in a child: a
    process that ran fully_shard keeps its gloo group's port listening after the group is destroyed
    (torch 2.13), which no test may leave behind."""
    config = two_rank_config("fsdp", precision="fp16")
    with joined_group(dist.HashStore(), 0, 1, config.parallel, torch.device("cpu")):
        return _sharded_fp16_steps(config, steps)


def test_fsdp_fp16_unscale_ignores_dtensors_scalar_warning_and_passes_others():
    with multiprocessing.get_context("spawn").Pool(1) as child:
        seen = child.apply(_warnings_as_one_rank, (3,))
    assert not [message for message in seen if message.startswith(DTENSOR_WARNING)], seen
    assert seen.count("another warning inside unscale") == 3, seen


def test_restart_after_sharded_loss_scaling_renews_the_sharded_scaler():
    assembled = _assembled_on_a_rank(two_rank_config("fsdp", precision="fp16"))
    scale_sharded_loss(assembled)  # as wrapping does, after fully_shard
    first = assembled.scaler
    assembled.restart()
    check_loss_scaling(assembled, "fsdp", "fp16")  # the scaler is still the sharded one, and the plugin's
    assert isinstance(assembled.scaler, ShardedGradScaler) and assembled.scaler is not first
    # Still no autocast region, and the loss scaled by the fresh scaler's 2**16: the gradients of an
    # fp32 model with the same initial weights, times 2**16 exactly.
    reference = assembled_alone(two_rank_config("fsdp", precision="fp32"))
    for scaled, plain in zip(_gradients(assembled), _gradients(reference), strict=True):
        torch.testing.assert_close(scaled / 2.0**16, plain)
