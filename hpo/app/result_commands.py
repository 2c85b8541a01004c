"""`hpo best`, `export`, `dashboard` and `report`: the commands that read a study's results."""

from __future__ import annotations

from pathlib import Path

from hpo.app.command_io import metric_names, output_file, show, show_trials, storage_url
from hpo.app.output import written_json
from hpo.errors import ExitCode, UserInputError
from hpo.storage import default_storage


def cmd_best(args) -> int:
    from hpo.app.best_and_export import open_study
    from hpo.app.pick import fastest_within
    from hpo.reporting import best_trials

    study = open_study(args.study, storage_url(args, args.study))
    trials = [fastest_within(study, args.within)] if args.within is not None else best_trials(study)
    what = "Pareto front" if args.within is None else f"fastest within {args.within}% of the best {metric_names(study)[0]}"
    show_trials(args, study, trials, what)
    return ExitCode.OK


def cmd_export(args) -> int:
    from hpo.app.best_and_export import open_study

    output = _checked_output(args)
    study = open_study(args.study, storage_url(args, args.study))
    if args.as_format != "yaml":
        return _export_as(args, study)
    written = _export_yaml(args, study, output)
    lines = [f"trial {number} config written to {path}" for number, path in written]
    show(args, [written_json(number, "yaml", path) for number, path in written], "\n".join(lines))
    return ExitCode.OK


def _checked_output(args) -> Path | None:
    """The YAML file of a one-trial yaml export (else None), once -o is known to be usable. Checked
    before the study is opened: nothing is read or written for a bad -o."""
    if args.as_format == "yaml" and args.output is None:
        raise UserInputError("-o FILE.yaml (or a folder with --top) is required")
    output = output_file(args.output) if args.as_format == "yaml" and args.top is None else None
    if args.as_format != "yaml" and args.output is not None and not Path(args.output).parent.is_dir():
        raise UserInputError(f"-o {args.output}: folder {Path(args.output).parent} does not exist; create it first")
    if args.format == "json" and args.output is None:
        raise UserInputError(f"--format json lists the files written: give -o; without it --as {args.as_format} prints its code")
    return output


def _export_yaml(args, study, output: Path | None) -> list[tuple[int, Path | str]]:
    """The configs written, as (trial number, path): the top K into a folder, or one trial to `output`."""
    from hpo.app.best_and_export import export_config, export_top, find_trial
    from hpo.app.pick import fastest_within

    if args.top is not None:
        return [(trial.number, path) for trial, path in export_top(study, args.top, Path(args.output))]
    trial = fastest_within(study, args.within) if args.within is not None else find_trial(study, args.trial)
    export_config(trial, output)
    return [(trial.number, args.output)]


def _export_as(args, study) -> int:
    from hpo.app.best_and_export import find_trial
    from hpo.app.export_as import export_as
    from hpo.app.pick import fastest_within

    if args.top is not None:
        raise UserInputError(f"--top exports hpo configs; --as {args.as_format} writes one trial (--trial N or --within PCT)")
    trial = fastest_within(study, args.within) if args.within is not None else find_trial(study, args.trial)
    result = export_as(trial, args.as_format, Path(args.output) if args.output else None)
    if isinstance(result, str):  # the code itself is the result
        print(result, end="")
        return ExitCode.OK
    lines = [f"trial {trial.number} as {args.as_format}: {path}" for path in result]
    show(args, [written_json(trial.number, args.as_format, path) for path in result], "\n".join(lines))
    return ExitCode.OK


def cmd_dashboard(args) -> int:
    from hpo.app.dashboard import serve_dashboard

    serve_dashboard(args.storage or default_storage(args.study or "hpo-study"), args.study, args.host, args.port)
    return ExitCode.OK


def cmd_report(args) -> int:
    from hpo.app.best_and_export import open_study
    from hpo.app.report import write_report

    output = output_file(args.output)
    write_report(open_study(args.study, storage_url(args, args.study)), output)
    show(args, [written_json(None, "report", args.output)], f"report written to {args.output}")
    return ExitCode.OK
