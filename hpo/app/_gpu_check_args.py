"""`hpo gpu-check`'s arguments: which combinations, how each runs, where the rows go."""

from __future__ import annotations

import argparse

__all__ = ["gpu_check_args"]


def gpu_check_args(p: argparse.ArgumentParser) -> None:
    """`hpo gpu-check`: which combinations, how each runs, where the rows go."""
    _which_combinations(p)
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend of compiled rows (default inductor)")
    p.add_argument("--batch-size", type=int, default=32, help="batch size of every combination (default 32)")
    p.add_argument("--steps", type=int, default=10, help="training steps after a passed probe (default 10)")
    p.add_argument("--device", default="auto", help="auto (the GPU if any), cpu, cuda:N or mps")
    p.add_argument("--timeout", type=float, default=1800, help="seconds one combination may take (default 1800)")
    p.add_argument("--out-dir", default=".", help="folder of gpu-<device>.jsonl (rows, resumed) and .md (table) (default .)")


def _which_combinations(p: argparse.ArgumentParser) -> None:
    """`--workloads`, and one flag per knob listing the values to combine."""
    from hpo.knobs.systems import TRIAL_KNOBS
    from hpo.workloads.catalog import SELF_CONTAINED_WORKLOADS

    p.add_argument(
        "--workloads",
        nargs="+",
        default=list(SELF_CONTAINED_WORKLOADS),
        help=f"workloads to run each combination on, with their default options: built-in names or package.module:Class "
        f"(default: {' '.join(SELF_CONTAINED_WORKLOADS)}; the hf_* workloads need your files: `hpo probe SPACE.yaml`)",
    )
    for knob in TRIAL_KNOBS.values():
        every = tuple(knob.cli_text(v) for v in knob.values)
        chosen = every if knob.gpu_check_values is None else tuple(knob.cli_text(v) for v in knob.gpu_check_values)
        _knob_values_arg(p, knob.flag, every, chosen, knob.help)


def _knob_values_arg(
    p: argparse.ArgumentParser, flag: str, choices: tuple[str, ...], default: tuple[str, ...], what: str
) -> None:
    which = "all" if tuple(default) == tuple(choices) else " ".join(default)
    p.add_argument(
        flag,
        nargs="+",
        choices=choices,
        default=list(default),
        metavar=flag.removeprefix("--").upper(),
        help=f"{what}, any of: {' '.join(choices)} (default: {which})",
    )
