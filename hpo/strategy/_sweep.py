"""`hpo probe SPACE.yaml`: probe every combination of the file's systems knobs on this machine,
for the file's model, without training, and rank them by measured throughput.

Searched hyperparameters are taken at one documented value each
(`hpo.config.resolve.representative_values`): a fixed value as it is, the middle of a range (the
geometric middle of a log range, rounded for integers and steps), the first of a list of choices. Every verdict goes into the verdict cache, the study's when `--study` names
one, so a later `hpo run` of that study starts from them: its trials reuse the verdicts, and the
sampler never proposes a combination, or a part of one, known to fail. Under a memory limit each
verified row also says the peak predicted at the study's batch and the largest batch that fits
(`hpo.strategy._memory_fit`).
"""

from __future__ import annotations

import dataclasses
import itertools
import multiprocessing
from dataclasses import dataclass

from hpo.config.resolve import build_config, representative_values
from hpo.config.space import SearchSpace
from hpo.config.trial import Knobs, TrialConfig
from hpo.errors import short_traceback
from hpo.hardware import resolve_device, trial_runtime
from hpo.logging import get_logger
from hpo.storage import open_storage, rdb_backend, storage_of
from hpo.strategy._combination import SignedMachine, error_row, knobs_text, probe_combination
from hpo.strategy._memory_fit import batch_ceiling
from hpo.strategy._rows import SweepRow
from hpo.strategy._warm_models import WarmModels
from hpo.verdicts import Verdict
from hpo.verify.probing import ReferenceMemory
from hpo.verify.stored import MachineFacts, MemoryVerdicts, StudyVerdicts, VerdictStore, reference_key
from hpo.verify.timing import DEFAULT_POLICY, TimingPolicy
from hpo.workloads.catalog import create_workload

_log = get_logger(__name__)

__all__ = ["combinations", "sweep"]


@dataclass(frozen=True)
class _Settings:
    """How a sweep probes: with this machine's facts or not (`machine`), fitting memory or not
    (`memory`), and the timing policy of each combination's steps (`policy`)."""

    machine: MachineFacts | None = None
    memory: bool = True
    policy: TimingPolicy = DEFAULT_POLICY
    confirm_facts: bool = False  # a speed read from `machine` is timed again before it ranks


def combinations(space: SearchSpace) -> list[Knobs]:
    names = list(space.systems)
    return [Knobs(**dict(zip(names, values, strict=True))) for values in itertools.product(*space.systems.values())]


def sweep(
    space: SearchSpace,
    store: VerdictStore,
    on_row=None,
    machine: MachineFacts | None = None,
    memory: bool = True,
    policy: TimingPolicy = DEFAULT_POLICY,
    warm: WarmModels | None = None,
    confirm_facts: bool = False,
) -> list[SweepRow]:
    """Probe every knob combination; rows ranked by samples/s (verdicts that did not pass last).
    With `machine`, a combination this machine already proved for this model, batch and software
    is read from it instead of probed, and what is probed is stored there. With `memory`, and a
    limit that applies, each verified row also gets its peak model's prediction (`memory_fit`:
    three small steps a combination); probe_first's sweep leaves that to the trials that train.
    `policy` times each combination (probe_first's: `ONE_STEP`, its race times again what could win).
    `confirm_facts` (`hpo probe`) times again, under `policy`, a speed read from `machine` before it ranks.
    `warm` keeps each verified combination's timed model, while they fit, for that race
    (`hpo.strategy._warm_models`; not from a fresh process, whose models end with it).

    After a sticky device error (a CUDA error leaves the device unusable until the process ends)
    the combination that raised it gets an error row, and the rest are probed in a fresh process,
    which reads the same verdict store: nothing later is judged on a poisoned device."""
    values = representative_values(space)
    configs = [build_config(space, values, knobs) for knobs in combinations(space)]
    device = resolve_device(configs[0].device)
    rows: list[SweepRow] = []
    report = (lambda row: (rows.append(row), on_row(row))) if on_row is not None else rows.append
    how = _Settings(machine, memory, policy, confirm_facts)
    remaining = _probe_all(space, configs, store, report, how=how, warm=warm)
    while remaining:
        remaining = _probe_in_fresh_process(space, configs, store, remaining, report, how)
    # The reference's own step time is known once any other combination was timed against it.
    reference_ms = (store.get(reference_key(configs[0], device)) or {}).get("step_ms")
    by_knobs = {str(config.knobs.as_dict()): config for config in configs}
    for row in rows:
        config = by_knobs[str(row.knobs)]
        if row.samples_per_s is None and row.slowdown is not None and reference_ms and Verdict.parse(row.verdict).ok:
            row.samples_per_s = 1000 * config.training.batch_size / (reference_ms * row.slowdown)
    return sorted(rows, key=lambda r: (r.samples_per_s is None, -(r.samples_per_s or 0.0)))


def _probe_all(
    space: SearchSpace,
    configs: list[TrialConfig],
    store: VerdictStore,
    report,
    indices=None,
    how: _Settings | None = None,
    warm: WarmModels | None = None,
) -> list[int]:
    """Probe `configs` (those at `indices`, default all) in this process, reporting each row.
    Returns the indices left unprobed after a sticky device error (empty when all were probed)."""
    indices = list(range(len(configs))) if indices is None else indices
    how = how or _Settings()
    device = resolve_device(configs[0].device)
    workload = create_workload(configs[0].workload, configs[0].workload_options)
    workload.bind_training(configs[0].training.params())
    with trial_runtime(device):
        references = ReferenceMemory()  # the reference's compared step runs once, not once a combination
        signed = SignedMachine(how.machine, workload, configs[0], how.confirm_facts) if how.machine is not None else None
        ceiling = batch_ceiling(space, configs[0]) if how.memory else None
        for position, index in enumerate(indices):
            config = configs[index]
            try:
                report(probe_combination(workload, config, device, store, references, ceiling, signed, how.policy, warm))
            except Exception as exc:  # noqa: BLE001 - probe_combination re-raises only a sticky device error
                _log.warning(f"hpo probe: {knobs_text(config)}: {short_traceback(exc)}the rest are probed in a fresh process")
                report(error_row(config, exc))
                return indices[position + 1 :]
    return []


def _probe_in_fresh_process(space, configs, store: VerdictStore, indices: list[int], report, how: _Settings) -> list[int]:
    """`_probe_all` in a new interpreter (spawned: nothing of this process's device state is
    inherited). Its rows come back through a pipe; returns what it left unprobed in turn."""
    context = multiprocessing.get_context("spawn")
    here, there = context.Pipe(duplex=False)
    child = context.Process(target=_probe_child, args=(space, configs, _store_address(store), indices, there, how))
    child.start()
    there.close()
    left = []
    while True:
        try:
            kind, payload = here.recv()
        except EOFError:
            break
        if kind == "row":
            report(SweepRow(**payload))
        else:
            left = payload
    child.join()
    if child.exitcode != 0 and not left:
        raise RuntimeError(f"hpo probe's fresh process ended with exit code {child.exitcode}; see the errors above")
    return left


def _probe_child(space, configs, address, indices, conn, how: _Settings) -> None:
    store = MemoryVerdicts() if address is None else _open_store(*address)
    left = _probe_all(space, configs, store, lambda row: conn.send(("row", dataclasses.asdict(row))), indices, how)
    conn.send(("left", left))
    conn.close()


def _store_address(store: VerdictStore) -> tuple[str, str] | None:
    """How a fresh process opens the same store: (storage URL, study name); None for an in-memory
    store, whose facts stay in this process (the fresh one measures what it needs again)."""
    if not isinstance(store, StudyVerdicts):
        return None
    return rdb_backend(storage_of(store.study)).url, store.study.study_name


def _open_store(url: str, study_name: str) -> StudyVerdicts:
    import optuna

    return StudyVerdicts(optuna.load_study(study_name=study_name, storage=open_storage(url, check_schema=False)))
