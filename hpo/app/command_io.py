"""What every `hpo` command shares: the storage it opens, the file it writes, how it shows a result."""

from __future__ import annotations

from pathlib import Path

from hpo.app.output import dumps, trial_json
from hpo.errors import UserInputError
from hpo.masking import mask_secrets
from hpo.storage import default_storage


def storage_url(args, study_name: str) -> str:
    return args.storage or default_storage(study_name)


def output_file(path: str) -> Path:
    """`-o FILE`: refused before anything is read or written when its folder is missing."""
    out = Path(path)
    if out.is_dir():
        raise UserInputError(f"-o {path}: is a folder; give a file name, e.g. -o {out / 'out'}")
    if not out.parent.is_dir():
        raise UserInputError(f"-o {path}: folder {out.parent} does not exist; create it first (mkdir -p {out.parent})")
    return out


def show(args, as_json, as_table: str) -> None:
    """The command's result on stdout, as `--format` asks: `as_json` in a shape of `hpo.app.output`.
    Masked as every output is: a trial's recorded error may quote a URL."""
    print(mask_secrets(dumps(as_json) if args.format == "json" else as_table))


def first_line(exc: BaseException) -> str:
    """A storage error's first line (SQLAlchemy wraps the driver's error as `orig`), password masked."""
    return mask_secrets((str(getattr(exc, "orig", None) or exc).splitlines() or [type(exc).__name__])[0])


def metric_names(study) -> list[str]:
    return study.metric_names or [f"objective {i}" for i in range(len(study.directions))]


def show_trials(args, study, trials: list, what: str) -> None:
    """`hpo run`'s and `hpo best`'s result: a list of trials (`trial_json`), or a table of them."""
    from hpo.app.pick import front_table

    names = metric_names(study)
    title = f"{what} of study {study.study_name!r} ({len(trials)} trial{'s' if len(trials) != 1 else ''}):"
    show(args, [trial_json(t, study.metric_names) for t in trials], f"{title}\n{front_table(trials, names)}")
