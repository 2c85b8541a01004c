"""Only steady-state times become verdicts or rankings. A kernel that pays 1 s on its first call
per (shape, dtype), as cuDNN attention builds a plan per shape (on an H200 it read 120-293
samples/s in the probe against 4470 in training), and is otherwise as fast as SDPA's math kernel,
is never `slow`, never ranked below half of eager in `hpo probe`, and its first-call cost is in
none of the repeats that probe_first ranks and ties it on. A kernel truly slow on every call is
still proven slow."""

from __future__ import annotations

import first_call_kernels
import pytest
import torch
from conftest import judged_despite_noise, toy_config
from first_call_kernels import FIRST_CALL_S, as_sdpa_math, planned

from hpo.config.space import parse_space
from hpo.config.trial import Knobs
from hpo.strategy import make_decision, sweep
from hpo.verify.probing import run_probe
from hpo.verify.stored import MemoryVerdicts
from hpo.verify.timing import DEFAULT_POLICY, ONE_STEP
from hpo.workloads.catalog import create_workload

CPU = torch.device("cpu")
N_BLOCKS = 2  # attention calls per forward
pytestmark = pytest.mark.usefixtures("one_torch_thread")  # step times that load cannot stretch 200x
SPACE = {
    "study": {"name": "first-call", "pruner": {"name": "none"}, "n_trials": 2, "skip_slow": True, "slow_ratio": 5.0},
    "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2, "n_blocks": N_BLOCKS},
    "params": {"lr": 1.0e-3, "batch_size": 16},
    "systems": {"precision": ["fp32"], "attention": ["eager", "sdpa_math"], "optimizer": "forloop", "compile_backend": "eager"},
}


@pytest.mark.slow
@pytest.mark.parametrize("policy", [DEFAULT_POLICY, ONE_STEP], ids=["hpo-probe", "probe-first-sweep"])
def test_a_kernel_slow_only_on_its_first_call_per_shape_is_neither_slow_nor_ranked_down(monkeypatch, policy):
    as_sdpa_math(monkeypatch, "plan_building_sdpa")
    planned.clear()
    space, store = parse_space(SPACE, source="test"), MemoryVerdicts()
    rows = {r.knobs["attention"]: r for r in sweep(space, store, policy=policy)}
    assert planned  # the kernel ran, and paid its first call per shape
    assert rows["sdpa_math"].verdict == "ok" and rows["eager"].verdict == "ok"  # never slow
    # A timed step that met the first call lasts at least FIRST_CALL_S (a sleep, which no load
    # shortens), so its rate is at most batch / FIRST_CALL_S; any faster rate is the kernel's own.
    # (Not compared with eager's row: the two are timed seconds apart, and a neighbour's burst
    # between them moves the ratio several times over on a shared machine: seen 5.3x under CI.)
    batch_size = SPACE["params"]["batch_size"]
    assert rows["sdpa_math"].samples_per_s > 2 * batch_size / FIRST_CALL_S, rows
    timed = [fact["trial_steps_ms"] for fact in store.records.values() if fact.get("trial_steps_ms")]
    assert timed and max(max(steps) for steps in timed) < 1000 * FIRST_CALL_S  # the first call was never timed
    planned.clear()  # probe_first's race meets the first call again, in models of its own
    decided = make_decision(space, list(rows.values()), keep=1)
    ranking = {line["knobs"]["attention"]: line for line in decided["ranking"]}
    first_call, eager = ranking["sdpa_math"], ranking["eager"]
    if policy is ONE_STEP:
        # The race starts from the sweep's one timing and times each candidate at least once more:
        # one timing never drops a candidate, and a precision is decided only on steady timings.
        assert planned and len(first_call["times_ms"]) >= 2, (decided["ranking"], decided["dropped"])  # the raw repeats
    assert max(first_call["times_ms"]) < 1000 * FIRST_CALL_S  # the plan's cost is in none of them
    assert eager["step_ms"] and first_call["step_ms"] < 1000 * FIRST_CALL_S, decided["ranking"]  # ranked on its own speed


@pytest.mark.slow
def test_a_kernel_slow_on_every_call_is_still_proven_slow(monkeypatch):
    config = toy_config(Knobs(precision="fp32", attention="sdpa_math", optimizer="forloop"), n_blocks=N_BLOCKS)
    config = type(config)(**{**config.__dict__, "skip_slow": True, "slow_ratio": 5.0})
    workload = create_workload(config.workload, config.workload_options)
    # Each step pays 200 ms of sleep, which no load shortens: ~20x the reference's ~10 ms step here,
    # still beyond the 5x limit when a busy machine (CI: two workers on two cores) stretches the
    # reference several times. (Scaling the sleep from a reference timed before the probe's own
    # let a quieter moment here and a busier one there bring the ratio under 5.)
    monkeypatch.setattr(first_call_kernels, "SLOW_S", 0.2 / N_BLOCKS)
    as_sdpa_math(monkeypatch, "slow_sdpa")
    # A reference whose own repeats spread past the proof's rule is, by design, too noisy to judge
    # against (`slow_not_judged`); on a busy 2-core CI host that happened once in three runs.
    result = judged_despite_noise(lambda: run_probe(workload, config, CPU))
    assert result.ok and result.slow is not None, (
        result.slowdown,
        result.reference_step_ms,
        result.trial_steps_ms,
        result.slow_not_judged,
    )
    assert result.slow.implicates == (("attention", "sdpa_math"), ("batch_size", 16)), result.slow
    # The steps judged are the slow kernel's own (each pays its per-call cost), against a reference
    # 5x faster at least.
    # Or, stopped once past that limit (`hpo.verify.timing._step_deadline`), a step known to be over it.
    if result.trial_step_stopped:
        assert result.trial_step_ms > config.slow_ratio * result.reference_step_ms, result
    else:
        assert result.trial_steps_ms and all(ms >= 1000 * first_call_kernels.SLOW_S * N_BLOCKS for ms in result.trial_steps_ms)
    assert result.slowdown > config.slow_ratio, result
