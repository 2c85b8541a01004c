"""`hpo train`, `doctor` and `gpu-check`: the commands about one configuration or this machine."""

from __future__ import annotations

import sys
from pathlib import Path

from hpo.app.command_io import show, storage_url
from hpo.app.output import dumps, outcome_json
from hpo.errors import ExitCode, UserInputError
from hpo.knobs.systems import TRIAL_KNOBS
from hpo.records import RecordKey


def cmd_train(args) -> int:
    from hpo.app.retrain import retrain
    from hpo.config.space import load_space
    from hpo.workloads.catalog import fetch_checkpoints

    fetch_checkpoints(load_space(args.config))  # an exported config is a space file with every value fixed
    config, outcome = retrain(Path(args.config))
    failure = outcome.attrs.get(RecordKey.ERROR_TRACEBACK)
    if failure:  # an error, not a verdict on the knobs: where it came from, on stderr
        print(failure.rstrip(), file=sys.stderr)
    lines = [f"verdict: {outcome.verdict}"]
    lines += [f"{name}: {value:.6g}" for name, value in zip(config.objectives, outcome.values or ())]
    show(args, outcome_json(config, outcome), "\n".join(lines))
    return ExitCode.OK if outcome.ok else ExitCode.NO_TRIAL_TRAINED


def cmd_doctor(args) -> int:
    from hpo.app.doctor import capability_report, device_from_flag, format_report, verdict_rows

    report = capability_report(device_from_flag(args.device))
    if args.study:
        from hpo.app.best_and_export import open_study

        report["verdicts"] = verdict_rows(open_study(args.study, storage_url(args, args.study)))
    print(dumps(report, indent=2) if args.format == "json" else format_report(report))
    return ExitCode.OK


def cmd_gpu_check(args) -> int:
    from hpo.app.gpu_check import MatrixCheck, check_here, matrix
    from hpo.workloads.catalog import NEEDS_USER_FILES

    needs_files = [name for name in args.workloads if name in NEEDS_USER_FILES]
    if needs_files:
        raise UserInputError(
            f"--workloads: gpu-check runs each workload with its default options, and {' '.join(needs_files)} has none "
            f"(it trains your checkpoint on your files); `hpo probe SPACE.yaml` runs the same sweep with them"
        )
    how = MatrixCheck(batch_size=args.batch_size, steps=args.steps, compile_backend=args.compile_backend, device=args.device)
    combos = matrix(
        {
            name: [knob.from_cli(text) for text in getattr(args, knob.flag[2:].replace("-", "_"))]
            for name, knob in TRIAL_KNOBS.items()
        }
    )
    print(check_here(Path(args.out_dir), args.workloads, combos, how, args.timeout))
    return ExitCode.OK
