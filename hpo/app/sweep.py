"""`hpo probe SPACE.yaml`: probe every combination of the file's systems knobs on this machine,
for the file's model, without training, and rank them by measured throughput.

Searched hyperparameters are taken at one documented value each
(`hpo.config.resolve.representative_values`): a fixed value as it is, the middle of a range (the
geometric middle of a log range, rounded for integers and steps), the first of a list of choices. Every verdict goes into the verdict cache, the study's when `--study` names
one, so a later `hpo run` of that study starts from them: its trials reuse the verdicts, and the
sampler never proposes a combination, or a part of one, known to fail. Under a memory limit each
verified row also says the peak predicted at the study's batch and the largest batch that fits
(`hpo.app.sweep_memory`).
"""

from __future__ import annotations

import dataclasses
import itertools
import multiprocessing
from dataclasses import dataclass

import torch

from hpo.app.sweep_memory import batch_ceiling, memory_fit
from hpo.app.sweep_models import WarmModels
from hpo.config.resolve import build_config, representative_values
from hpo.config.space import SearchSpace
from hpo.config.trial import Knobs, TrialConfig
from hpo.errors import error_verdict, short_traceback
from hpo.hardware.runtime import resolve_device, trial_runtime
from hpo.knobs.registry import KNOB_NAMES
from hpo.logging import get_logger
from hpo.storage.open import open_storage
from hpo.storage.optuna_compat import rdb_backend, storage_of
from hpo.trial.outcome import cached_verdict
from hpo.verdicts import Verdict
from hpo.verify.cache import MemoryVerdicts, StudyVerdicts, VerdictStore, reference_key, speed_key, verdict_key
from hpo.verify.compared import ReferenceMemory
from hpo.verify.implied import implied_failure
from hpo.verify.known_failures import is_sticky_device_error
from hpo.verify.machine_facts import MachineFacts, batch_signature, model_signature
from hpo.verify.probe import keep_probe, run_probe
from hpo.verify.reference_knobs import REFERENCE_KNOBS
from hpo.verify.steady import DEFAULT_POLICY, TimingPolicy
from hpo.workloads.catalog import create_workload

_log = get_logger(__name__)

__all__ = ["SweepRow", "combinations", "sweep", "table"]


@dataclass
class SweepRow:
    knobs: dict
    verdict: str
    samples_per_s: float | None
    slowdown: float | None
    peak_mem_mb: float | None
    loss_rel_err: float | None
    grad_rel_err: float | None
    cached: bool
    slowdown_at_least: bool = False  # the step was stopped past the slow limit: a lower bound
    loss_bound: float | None = None  # the bounds the errors were judged against, measured on this model
    grad_bound: float | None = None
    # This machine's facts (`hpo.verify.machine_facts`): the entry's key, whether the row was read
    # from it instead of probed, and the step times it was last raced on (probe_first's re-timing).
    machine_key: str | None = None
    from_machine: bool = False
    known_ms: list[float] | None = None
    # The timed steps its speed is the fastest of (after the untimed ones; `hpo.verify.steady`).
    steps_ms: list[float] | None = None
    # With a memory limit (`hpo.app.sweep_memory`): the peak predicted at the study's batch, and
    # the largest batch that fits; None without one.
    predicted_peak_mb: float | None = None
    largest_batch: int | None = None


@dataclass(frozen=True)
class _Settings:
    """How a sweep probes: with this machine's facts or not (`machine`), fitting memory or not
    (`memory`), and the timing policy of each combination's steps (`policy`)."""

    machine: MachineFacts | None = None
    memory: bool = True
    policy: TimingPolicy = DEFAULT_POLICY


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
) -> list[SweepRow]:
    """Probe every knob combination; rows ranked by samples/s (verdicts that did not pass last).
    With `machine`, a combination this machine already proved for this model, batch and software
    is read from it instead of probed, and what is probed is stored there. With `memory`, and a
    limit that applies, each verified row also gets its peak model's prediction (`memory_fit`:
    three small steps a combination); probe_first's sweep leaves that to the trials that train.
    `policy` times each combination (probe_first's: `ONE_STEP`, its race times again what could win).
    `warm` keeps each verified combination's timed model, while they fit, for that race
    (`hpo.app.sweep_models`; not from a fresh process, whose models end with it).

    After a sticky device error (a CUDA error leaves the device unusable until the process ends)
    the combination that raised it gets an error row, and the rest are probed in a fresh process,
    which reads the same verdict store: nothing later is judged on a poisoned device."""
    values = representative_values(space)
    configs = [build_config(space, values, knobs) for knobs in combinations(space)]
    device = resolve_device(configs[0].device)
    rows: list[SweepRow] = []
    report = (lambda row: (rows.append(row), on_row(row))) if on_row is not None else rows.append
    how = _Settings(machine, memory, policy)
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
        signed = _Signed(how.machine, workload, configs[0]) if how.machine is not None else None
        ceiling = batch_ceiling(space, configs[0]) if how.memory else None
        for position, index in enumerate(indices):
            config = configs[index]
            try:
                report(_probe_one(workload, config, device, store, references, ceiling, signed, how.policy, warm))
            except Exception as exc:  # noqa: BLE001 - _probe_one re-raises only a sticky device error
                _log.warning(f"hpo probe: {_knobs(config)}: {short_traceback(exc)}the rest are probed in a fresh process")
                report(_error_row(config, exc))
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


def _error_row(config: TrialConfig, exc: BaseException) -> SweepRow:
    return SweepRow(config.knobs.as_dict(), str(error_verdict(exc)), None, None, None, None, None, cached=False)


def _values(config: TrialConfig) -> dict:
    """What a verdict's implicated part can name: the knobs, and the batch size a `slow` was timed at."""
    return {**config.knobs.as_dict(), "batch_size": config.training.batch_size}


def _knobs(config: TrialConfig) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.knobs.as_dict().items())


class _Signed:
    """This machine's facts, with the signature of the model and batch a sweep probes (one model
    built to read it: its shapes, not its weights, are what the key needs)."""

    def __init__(self, machine: MachineFacts, workload, config: TrialConfig) -> None:
        self.machine = machine
        self.signature = model_signature(workload.build_model(REFERENCE_KNOBS.attention))
        self.batch = batch_signature(next(workload.train_batches(config.training.batch_size, config.seed)))

    def key(self, facts: dict) -> str:
        return self.machine.key(self.signature, self.batch, facts)[0]


def _probe_one(
    workload,
    config: TrialConfig,
    device: torch.device,
    store: VerdictStore,
    references: ReferenceMemory,
    ceiling: int | None,
    signed=None,
    policy: TimingPolicy = DEFAULT_POLICY,
    warm: WarmModels | None = None,
) -> SweepRow:
    key, facts = verdict_key(config, device)
    batch_size = config.training.batch_size
    record, speed = store.get(key), store.get(speed_key(key, batch_size))
    cached = record is not None and (speed is not None or not cached_verdict(record).ok)
    machine_key = signed.key(facts) if signed is not None else None
    known = signed.machine.get(machine_key) if signed is not None and not cached else None
    if known is not None:  # proved on this machine by an earlier study: into this study's store
        store.add(key, known["verdict"])
        if known.get("speed") is not None:
            store.add(speed_key(key, batch_size), known["speed"])
        record, speed, cached = known["verdict"], known.get("speed"), True
    implied = None if cached else implied_failure(store, _values(config), facts["device"])
    if implied is not None:
        return SweepRow(config.knobs.as_dict(), str(implied), None, None, None, None, None, cached=True)
    if not cached:
        try:
            probe = run_probe(workload, config, device, store, references=references, policy=policy, keep_timed=warm is not None)
        except Exception as exc:
            if is_sticky_device_error(exc):
                raise
            _log.warning(f"hpo probe: {_knobs(config)} failed with an error (not a verdict):\n{short_traceback(exc)}")
            return _error_row(config, exc)
        record, speed = keep_probe(store, key, facts, probe, batch_size)
        if probe.timed_model is not None:
            warm.offer(probe.timed_model, probe.peak_mem_mb)
        if signed is not None:
            signed.machine.put(machine_key, {"facts": facts, "verdict": record, "speed": speed})
    verdict = cached_verdict(record)
    if verdict.ok and speed is not None:
        verdict = cached_verdict(speed)
    step_ms = (speed or {}).get("trial_step_ms")
    ok = verdict.ok
    fit = memory_fit(workload, config, device, store, key, ceiling) if ok and ceiling is not None else None
    return SweepRow(
        knobs=config.knobs.as_dict(),
        verdict=str(verdict),
        samples_per_s=1000 * batch_size / step_ms if ok and step_ms else None,
        slowdown=(speed or {}).get("slowdown"),
        slowdown_at_least=bool((speed or {}).get("trial_step_stopped")),
        peak_mem_mb=record.get("peak_mem_mb"),
        loss_rel_err=record.get("loss_rel_err"),
        grad_rel_err=record.get("grad_rel_err"),
        loss_bound=record.get("loss_bound"),
        grad_bound=record.get("grad_bound"),
        cached=cached,
        machine_key=machine_key,
        from_machine=known is not None,
        known_ms=(known or {}).get("raced_ms"),
        steps_ms=(speed or {}).get("trial_steps_ms") if ok else None,
        predicted_peak_mb=fit.predicted_peak_mb if fit else None,
        largest_batch=fit.largest_batch if fit else None,
    )


def table(rows: list[SweepRow]) -> str:
    """The rows for people; the memory columns only when a limit applied to some row."""
    memory = any(r.largest_batch is not None for r in rows)
    head = [
        "precision",
        "attention",
        "optimizer",
        "ckpt",
        "compile",
        "samples/s",
        "x fp32",
        "peak MB",
        *(["pred MB", "max batch"] if memory else []),
        "loss err",
        "grad err",
        "bound",
        "verdict",
    ]
    body = [
        [str(r.knobs[k]) for k in KNOB_NAMES]
        + [
            _fmt(r.samples_per_s, "{:.1f}"),
            _fmt(r.slowdown, ">={:.2f}" if r.slowdown_at_least else "{:.2f}"),
            _fmt(r.peak_mem_mb, "{:.0f}"),
        ]
        + ([_fmt(r.predicted_peak_mb, "{:.0f}"), _fmt(r.largest_batch, "{}")] if memory else [])
        + [_fmt(r.loss_rel_err, "{:.1e}"), _fmt(r.grad_rel_err, "{:.1e}"), _fmt(r.grad_bound, "{:.1e}"), r.verdict[:70]]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [head, *body])


def _fmt(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)
