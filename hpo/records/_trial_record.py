"""The trial record: every user attr hpo writes on a trial, each with its meaning."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from hpo.records._parts import KnobsObserved, KnobsRequested, Record, RuntimeSettings

__all__ = ["TrialRecord"]


class TrialRecord(Record):
    """Every user attr of a trial. Only `verdict` is certain to be present: a trial that crashed
    or was rejected before training records what it got to."""

    verdict: str = Field(
        description="`ok`, `incompatible: …`, `slow: …`, `diverged: step N …`, `mismatch: …`, `oom: …`, "
        "`pruned: step N` (`pruned: at N ms of training` under a time budget, whose report steps are milliseconds), "
        "`crashed: …`, `timeout: …` or `error: …`: why the trial ended as it did"
    )
    config: dict[str, Any] | None = Field(None, description="the complete resolved config (`hpo export` writes it)")
    knobs_requested: KnobsRequested | None = Field(None, description="the trial's knobs (`Knobs`) as asked")
    knobs_observed: KnobsObserved | dict[str, Any] | None = Field(
        None,
        description="the knobs as the evidence showed they ran, plus `attention_dtype`, `compiled_graphs` and `grad_scaler` "
        "(a trial of ranks: rank 0's, every rank's agreeing with it); empty when rejected before any step ran",
    )
    loader_requested: dict[str, Any] | None = Field(
        None,
        description="the input pipeline as asked: `loader`, `num_workers`, `pin_memory`, `prefetch_factor`, "
        "`persistent_workers` (see Input pipeline)",
    )
    loader_observed: dict[str, Any] | None = Field(
        None,
        description="what delivered the batches: `workers` (worker processes that made batches), `main_process`, "
        "`pinned` (null where pinning does nothing: no CUDA device, or batches that arrive on it, as DALI's), "
        "`delivered_on` (the device types the batches arrived on), `batches_checked` (first batches matched "
        "against num_workers=0), `checked_by` (`indices`: the samples a map-style dataset's batch was made from, "
        "whatever their augmentation; `content`: an iterable dataset's or DALI's batches, by checksum), `data_wait_ms` (median wait per step) and `core_split` (a CPU trial's cores, "
        "workers and torch threads)",
    )
    data_wait_share: float | None = Field(
        None, description="seconds the training steps waited for their next batch over the seconds of training"
    )
    parallel: dict[str, Any] | None = Field(
        None,
        description="a trial run as several ranks (`systems.parallel`): `global_batch`, `batch_per_rank` (`batch_per_rank_seen`: rows a "
        "rank trained on), `samples_per_s` over all ranks, `peak_memory_mb_per_rank`, `_max`, `wire` (a steady step's collectives: calls, "
        "elements per call, dtypes), `param_dtypes_seen`, `reduce_dtypes_seen` (on the wire), `collective_share_per_rank`, `compiled_per_rank` "
        "(each rank's `graphs`, `train_graphs`, `checkpoint_regions`), `last_steps`, `probe_s_per_rank` and `probe` (the probe on every rank, "
        "what it does not cover), `knobs_not_observed` (why no step captured the knobs), `lightning` (a Lightning workload's Trainer on rank 0); "
        "under a memory limit each rank's fit before training: `predicted_peak_mb_per_rank`, `memory_model_per_rank`, with "
        "`batch_size: auto` `confirmed_peak_mb_per_rank` (each confirming step's peak by a rank's batch; null: a rank stopped first)",
    )
    collective_share: float | None = Field(
        None,
        description="a trial of several ranks: the largest of its ranks' shares of the recorded step's wall time during "
        "which a collective was in flight, read from the profiler (gloo's `gloo:<collective>` spans, enqueue to "
        "completion; on CUDA the NCCL kernels), overlapping collectives merged and compute running meanwhile not "
        "subtracted; each rank's share in `parallel.collective_share_per_rank`",
    )
    parallel_observed: dict[str, Any] | None = Field(
        None,
        description="a trial of several ranks: each parallel knob's effect as rank 0's recorded step showed it, null for "
        "a knob with nothing to act on (the other strategy's): `bucket_cap_mb` as the gradient all-reduces "
        "(`all_reduce_calls`, their `dtypes`, `largest_all_reduce_mb`, `all_reduced_mb`, beside `largest_gradient_mb`), "
        "`gradient_as_bucket_view` as `gradients_in_buckets` of `gradients` (living in an all-reduced storage), "
        "`reshard_after_forward` as `blocks_gathered_after_forward` of `blocks`. An effect that contradicts the "
        "request on any rank ends the trial `mismatch: rank R: systems.parallel.<knob> ...`",
    )
    verdict_implicates: list[list[Any]] | None = Field(
        None,
        description="the knob values a rejection blames, as [knob, value] pairs that fail together (the sampler avoids them)",
    )
    verdict_key: str | None = Field(None, description="the key of the trial's cached knob verdict (see Verdict cache)")
    trainer: str | None = Field(
        None, description="the loop that trained it: `hpo` (hpo's own) or `lightning` (Lightning's Trainer)"
    )
    lightning_precision: str | None = Field(None, description="on a Lightning trial: the Trainer's precision string it ran with")
    worker: str | None = Field(None, description="`host:pid` of the worker that ran the trial")
    device: str | None = Field(None, description="the device model the trial ran on")
    torch_version: str | None = Field(None, description="torch's version")
    hpo_version: str | None = Field(None, description="hpo's version")
    runtime: RuntimeSettings | dict[str, bool | str] | None = Field(
        None,
        description="global settings the trial ran under: torch's `tf32` and `cpu_allocator`, "
        "the C allocator's setting (on glibc, freed memory is kept for the next step; see hpo.hardware._allocator)",
    )
    probe_s: float | None = Field(None, description="seconds the pre-trial probe took (0 when its verdict was cached)")
    probe_cached: bool | None = Field(None, description="whether the knob verdict came from the study's cache")
    verdict_from_cache: bool | None = Field(
        None,
        description="the trial ended on a verdict cached by an earlier trial or `hpo probe`, without running: its "
        "`knobs_observed` is then empty, since nothing ran",
    )
    probe_blame: str | None = Field(
        None,
        description="how a knob verdict was proven: `contract` (a known upstream refusal), `evidence` (a knob ran as "
        "something else) or `differential` (the reference knobs pass where these fail, tried value by value)",
    )
    error_traceback: str | None = Field(
        None,
        description="on an `error:` trial (state FAIL): the last lines of its traceback; the worker's stderr has all of it",
    )
    probe_reference_reused: bool | None = Field(
        None,
        description="whether the probe read the fp32 reference's compared step from an earlier probe of this model "
        "in the same worker, instead of running it again",
    )
    slowdown: float | None = Field(
        None,
        description="the trial's fastest steady training step over the fp32/eager reference's step: what the slow check "
        "judged (on a Lightning trial, the probe's timed step); on a `slow` trial, the number its verdict states, both "
        "sides timed in the proof",
    )
    slowdown_timed_apart_s: float | None = Field(
        None,
        description="seconds between the reference's timing and this trial's training: `slowdown` divides steps timed "
        "that far apart, not side by side, so a machine busier at one moment than the other moves it (a `slow` "
        "verdict is only given after timing both side by side); null when the reference's time is unknown or the "
        "trial recorded no slowdown",
    )
    slowdown_timed_again: dict | None = Field(
        None,
        description="set when the slowdown against the stored reference time was implausibly low (under 0.5): the trial's "
        "knobs and the reference timed again side by side, one step each a round; `slowdown` is then step_ms / "
        "reference_ms from here, and `stored_reference_ms` / `slowdown_against_stored` what it replaced. A faster "
        "reference step replaces the stored one for later trials. Where either side's fastest steps disagree by "
        "over 25%, no slowdown is recorded and `slow_not_judged` says why",
    )
    slow_not_confirmed: str | None = Field(
        None,
        description="what the slow check first measured, when timing the knobs again beside the reference found "
        "nothing slow (a busy machine): the trial then trained again from its first step without the check",
    )
    slow_not_judged: str | None = Field(
        None,
        description="why the trial's speed was not judged: its steps were over the limit but the fp32/eager "
        "reference's own steady steps varied too much on this machine (e.g. `reference spread 41% ...`), or, timed "
        "beside the reference, its steps were over the limit in too few pairs of steps to rule out noise (`not proven "
        "slow: ...`), and the trial trained without the check; or it timed fewer steady steps than the check reads (`too few steps to judge "
        "speed: ...`), and records no `slowdown`",
    )
    probe_loss_rel_err: float | None = Field(None, description="relative loss error against the fp32/eager reference")
    probe_grad_rel_err: float | None = Field(None, description="relative gradient error (global L2) against the reference")
    probe_loss_floor: float | None = Field(
        None,
        description="the relative loss error rounding alone gives on this model under the trial's precision: the "
        "reference's step with every value rounded to the precision's mantissa (0 for fp32; see failures.md)",
    )
    probe_grad_floor: float | None = Field(None, description="the same floor for the gradients (global L2)")
    probe_loss_bound: float | None = Field(None, description="the bound `probe_loss_rel_err` was judged against")
    probe_grad_bound: float | None = Field(None, description="the bound `probe_grad_rel_err` was judged against")
    probe_numerics_not_judged: str | None = Field(
        None,
        description="why the probe's loss and gradient errors were not judged: its fp32/eager reference was observed "
        "running other knobs (`the reference ran sdpa_flash, not eager: this workload ignores `attention``), so an "
        "error against it would measure nothing; the errors and bounds are then null",
    )
    train_samples_per_s: float | None = Field(
        None,
        description="samples trained over `train_s`: the speed a user gets, every wait for a batch (a loader worker "
        "starting each epoch) and the compiling step included; what a throughput objective optimizes. Null when no "
        "training step was timed",
    )
    steady_samples_per_s: float | None = Field(
        None,
        description="samples per second at the median steady-state step (`step_time_ms`): the compute's speed, which "
        "a wait only some steps pay does not move; MFU is computed from it. Null without a steady step",
    )
    step_time_ms: float | None = Field(None, description="median steady-state step time")
    peak_mem_mb: float | None = Field(None, description="peak memory (see below)")
    n_params: int | None = Field(None, description="the model's parameter count")
    metrics: dict[str, float] | None = Field(None, description="the workload's metrics at the last evaluation")
    steps_run: int | None = Field(
        None, description="training steps run: max_steps, or fewer when the time budget or the target ended it"
    )
    train_s: float | None = Field(None, description="seconds of training (see What counts as training time)")
    time_to_target_s: float | None = Field(
        None, description="with workload.target: seconds of training until an evaluation reached it; null when none did"
    )
    target_reached: bool | None = Field(None, description="with workload.target: whether an evaluation reached it")
    model_flops_per_sample: float | None = Field(
        None, description="model FLOPs of one forward and backward pass per sample (recomputation not counted)"
    )
    achieved_tflops: float | None = Field(
        None, description="model FLOPs per sample x `steady_samples_per_s`, in TFLOP/s (the steady steps' compute)"
    )
    mfu: float | None = Field(
        None,
        description="achieved over the device's peak for the trial's precision (a trial of N ranks: over N devices' "
        "peak); null without a known peak",
    )
    peak_tflops: float | None = Field(
        None, description="the peak MFU is measured against (a trial of N ranks: N times one rank's device's)"
    )
    peak_source: str | None = Field(None, description="where the peak comes from: a datasheet, or a timed matmul on this CPU")
    trial_s: float | None = Field(None, description="wall time of the whole trial: probe, build, training and evaluation")
    phases_s: dict[str, float] | None = Field(
        None,
        description="seconds per phase of the trial, in order: `start` (trial process start), `sample`, `data`, "
        "`probe`, `build`, `train`, `evidence` (the profiled step), `eval`, `flops`, `storage`; a phase not passed is absent",
    )
    knobs_chosen_by: str | None = Field(
        None,
        description="with `study.strategy: probe_first`: `sweep`, the study's opening sweep chose the trial's knobs "
        "(the sampler chose only the precision among those kept, and the hyperparameters)",
    )
    knobs_sweep_rank: int | None = Field(
        None,
        description="with `study.strategy: probe_first`: the rank of the trial's knob combination within its precision "
        "in the sweep's ranking (1: the fastest, ties going to the one closest to the reference)",
    )
    warm_start_from: str | None = Field(None, description="on a warm-started trial: `study#trial` whose configuration it repeats")
    retry_of: int | None = Field(None, description="on a retry: the number of the crashed trial it repeats")
    previous_verdict: str | None = Field(None, description="on a retry: the verdict of the trial it repeats")
    error_signature: str | None = Field(
        None,
        description="on an error: `<type>: <message> @ <module>:<function>`, the innermost frame in hpo or the workload; "
        "a retry that fails with the signature of the attempt before it is not retried again",
    )
    previous_error_signature: str | None = Field(None, description="on a retry: the error signature of the attempt it repeats")
    not_retried: str | None = Field(
        None, description="on an error that is not retried: why (`same error as trial N`, or the retries spent)"
    )
    memory_limit_mb: float | None = Field(
        None,
        description="the memory limit the trial was held to: `study.memory_limit_gb`, or on CUDA the device's total "
        "less a margin (see Memory); absent without a limit",
    )
    memory_model: dict[str, Any] | None = Field(
        None,
        description="the knob combination's peak model, peak = `fixed_mb` + `per_sample_mb` x batch, fitted to real "
        "steps at `batches`",
    )
    predicted_peak_mb: float | None = Field(
        None, description="the peak model's prediction at the trial's batch size, beside the measured `peak_mem_mb`"
    )
    batch_size_chosen: int | None = Field(
        None, description="with `params.batch_size: auto`: the batch the trial trained at (its `config` holds it too)"
    )
    lr_chosen: float | None = Field(
        None, description="with `params.batch_size: auto`: the learning rate the trial trained at, after `params.lr_scaling`"
    )
