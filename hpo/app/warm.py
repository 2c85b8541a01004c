"""`hpo enqueue --study B --from-study A [--space B.yaml] [--top K]`: warm-start study B with the
best configurations of study A (see hpo.study._warm_start for how they map onto B's space)."""

from __future__ import annotations

from hpo.app.command_io import show
from hpo.app.output import enqueued_json
from hpo.errors import ExitCode, UserInputError

__all__ = ["enqueue_from_study"]


def enqueue_from_study(args, default_from_url: str, target_url: str) -> int:
    """`hpo enqueue --study B --from-study A`: A's best configurations become B's first trials."""
    from hpo.app.best_and_export import open_study
    from hpo.study import create_or_resume, warm_start

    if args.top < 1:
        raise UserInputError(f"--top must be >= 1, got {args.top}")
    source = open_study(args.from_study, args.from_storage or default_from_url)
    space = _target_space(args, source, target_url)
    target = create_or_resume(space, target_url, args.study)
    rows, lines = [], []
    for started in warm_start(source, target, space, args.top):
        where = f"{args.from_study} trial {started.source_trial}"
        enqueued = started.params is not None  # {} when B searches none of A's params: still enqueued
        rows.append(enqueued_json(args.study, where, started.params, None if enqueued else started.why_skipped))
        lines.append(
            f"{where}: enqueued in {args.study!r} with {started.params}"
            if enqueued
            else f"{where}: skipped, {started.why_skipped}"
        )
    show(args, rows, "\n".join(lines))
    return ExitCode.OK


def _target_space(args, source, target_url: str):
    """B's space: from --space (an existing B must have it), else B's own when B exists, else A's."""
    from hpo.config.space import load_space
    from hpo.storage import open_storage
    from hpo.study import open_hpo_study, space_of

    if args.space is not None:
        return load_space(args.space)
    try:
        return open_hpo_study(open_storage(target_url), args.study)[1]
    except UserInputError:
        return space_of(source)
