"""A tiny 2-rank trial (of the quickstart model, or of another workload) and a study of them; the
parity check of a parallel trial's losses against one process at the same global batch; faults injected into one of its ranks through the launcher's per-step hook
(module level, so the spawned ranks import them by name: `hpo.parallel.run_ranks(after_step=...)`);
and `no_rank_left_behind`, the check that a test leaves no rank process alive and no port bound,
which a test module imports to use."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest
import torch

from hpo.config.resolve import fixed_config
from hpo.config.space import parse_space
from hpo.config.trial import TrialConfig
from hpo.parallel import train_on_rank

# A 2-layer causal LM small enough that its ranks' start (importing torch) is most of the time.
QUICKSTART_MODEL = {"name": "causal_lm", "d_model": 16, "n_layers": 2, "n_heads": 2, "seq_len": 16, "corpus_bytes": 20000}


def two_rank_config(
    strategy: str = "ddp",
    precision: str = "fp32",
    max_steps: int = 4,
    device: str = "cpu",
    workload: dict = QUICKSTART_MODEL,
    params: dict | None = None,
    study: dict | None = None,
    **parallel,
) -> TrialConfig:
    """A trial of `workload` (by default the quickstart's tiny causal LM) as 2 ranks, at `params`
    (by default batch 8, lr 1e-3) under `study`'s settings."""
    raw = {
        "study": study or {},
        "workload": {**workload, "max_steps": max_steps},
        "params": params or {"batch_size": 8, "lr": 1e-3},
        "systems": {
            "precision": precision,
            "attention": "eager",
            "optimizer": "forloop",
            "compile": False,
            "device": device,
            "parallel": {"processes": 2, "strategy": strategy, "collective_timeout_s": 60, **parallel},
        },
    }
    return fixed_config(parse_space(raw, "two_rank_config"))


# The ranks reduce the same gradients in another order than one process sums them, so fp32 losses
# differ by rounding only. Measured after 4 AdamW steps, relative: about 2e-7 on the quickstart
# model and on the zoo's GPT-2 (2.0e-7 under DDP and FSDP2 alike). The bound leaves 50x for another
# host's kernels; training on the wrong rows misses it by 1e-2 (GPT-2 on one half of each global
# batch alone: 8e-3).
PARITY_RTOL = 1e-5


def one_process_losses(config: TrialConfig) -> list[float]:
    """The losses of `config` trained as one process at the same global batch (one thread, as a rank runs)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train_on_rank(config)["losses"]
    finally:
        torch.set_num_threads(threads)


def assert_parity(config: TrialConfig, outcome) -> None:
    """The ranks' losses over the global batch equal one process's, up to rounding."""
    assert outcome.verdict.kind.value == "ok", str(outcome.verdict)
    ranks, alone = outcome.ranks[0]["losses"], one_process_losses(config)
    assert ranks == pytest.approx(alone, rel=PARITY_RTOL)


def two_rank_space(study: str, n_trials: int, max_steps: int = 3) -> dict:
    """A study of 2-rank trials of the model above, searching the strategy and the learning rate."""
    return {
        "study": {"name": study, "sampler": {"name": "random", "seed": 0}, "pruner": {"name": "none"}, "n_trials": n_trials},
        "workload": {
            "name": "causal_lm",
            "max_steps": max_steps,
            "eval_every": max_steps,
            "d_model": 16,
            "n_layers": 2,
            "n_heads": 2,
            "seq_len": 16,
            "corpus_bytes": 20000,
            "eval_batches": 2,
        },
        "params": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}, "batch_size": 8},
        "systems": {
            "precision": "fp32",
            "attention": "eager",
            "optimizer": "forloop",
            "compile": False,
            "device": "cpu",
            "parallel": {"processes": 2, "strategy": ["ddp", "fsdp"], "collective_timeout_s": 60},
        },
    }


def assert_two_ranks_trained(record: dict, space: dict) -> None:
    """A trial's `parallel` record shows each of its two ranks trained every step of `space`'s
    workload (reported through the launcher's store) on its half of the global batch, and each
    rank's peak memory was read."""
    max_steps = space["workload"]["max_steps"]
    assert record["last_steps"] == {"0": max_steps - 1, "1": max_steps - 1}
    assert (record["global_batch"], record["batch_per_rank_seen"]) == (8, 4)
    assert len(record["peak_memory_mb_per_rank"]) == 2


# The rank and the step after which each fault strikes: its peer is then inside the next step.
FAULTY_RANK, FAULTY_STEP = 1, 1


def kill_rank_mid_run(rank: int, step: int) -> None:
    if (rank, step) == (FAULTY_RANK, FAULTY_STEP):
        os.kill(os.getpid(), signal.SIGKILL)


def hang_rank(rank: int, step: int) -> None:
    """The rank stops answering (as one stuck in a kernel or a deadlock): its peer's next gradient
    all-reduce waits for it until the group's collective timeout."""
    if (rank, step) == (FAULTY_RANK, FAULTY_STEP):
        time.sleep(3600)


LATE_S = 2.0  # how long the late rank keeps its peer waiting in the recorded step


def late_rank(rank: int, step: int) -> None:
    """The faulty rank starts the recorded step (step 1) LATE_S after its peer, whose first
    collective of that step is then in flight until it arrives."""
    if (rank, step) == (FAULTY_RANK, 0):
        time.sleep(LATE_S)


def stall_every_rank(rank: int, step: int) -> None:
    """Every rank marks that it trains (a file under $HPO_TEST_RANK_MARKS), then stalls deaf to
    SIGINT and SIGTERM, as a rank stuck in C++ code (a collective, a kernel) runs no Python handler."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(os.path.join(os.environ["HPO_TEST_RANK_MARKS"], f"rank{rank}"), "w") as mark:
        mark.write(str(os.getpid()))
    time.sleep(3600)


def _listening_ports(process: psutil.Process) -> set[int]:
    return {c.laddr.port for c in process.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}


def _is_rank(process: psutil.Process) -> bool:
    """Alive and not multiprocessing's resource tracker, which the first spawn starts once for the
    whole pytest process and which ends with it."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(process.cmdline())
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(autouse=True)
def no_rank_left_behind():
    """After the test: every process it started has ended, and it left no port listening."""
    me = psutil.Process()
    children, ports = {p.pid for p in me.children(recursive=True)}, _listening_ports(me)
    yield
    left = [p for p in me.children(recursive=True) if p.pid not in children and _is_rank(p)]
    assert not left, f"rank processes left running: {[(p.pid, p.cmdline()[:3]) for p in left]}"
    bound = _listening_ports(me) - ports
    assert not bound, f"ports left listening: {sorted(bound)}"


HOG_BYTES = 3 * 2**30  # far over the memory limit the test sets; touched, so it is resident


def hog_memory_on_rank(rank: int, step: int) -> None:
    """The faulty rank takes (and touches) HOG_BYTES after step 1, as a rank whose activations or
    a leak outgrow the limit; held in a global so that it stays."""
    if (rank, step) == (FAULTY_RANK, FAULTY_STEP):
        global _HELD
        _HELD = torch.ones(HOG_BYTES // 4)


def assembled_alone(config: TrialConfig, device: torch.device = torch.device("cpu")):
    """The trial's model as one rank (world 1) assembles it, unwrapped: its workload built and bound
    as `train_on_rank` builds it."""
    from hpo.parallel.rank_loop import _assembled
    from hpo.workloads.catalog import create_workload

    workload = create_workload(config.workload, config.workload_options)
    workload.bind_training(config.training.params())
    return _assembled(workload, config, config.parallel, device, world=1)
