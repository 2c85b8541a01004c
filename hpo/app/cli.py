"""The `hpo` command: parse, call one library function, map errors to exit codes. The commands
live by job in `study_commands`, `result_commands` and `machine_commands`."""

from __future__ import annotations

import logging
import os
import sys
import traceback
import warnings

from hpo.app.command_io import first_line
from hpo.app.machine_commands import cmd_doctor, cmd_gpu_check, cmd_train
from hpo.app.result_commands import cmd_best, cmd_dashboard, cmd_export, cmd_report
from hpo.app.study_commands import cmd_enqueue, cmd_probe, cmd_run, cmd_validate, cmd_worker
from hpo.errors import ExitCode, UserInputError
from hpo.logging import mask_library_logs, set_verbosity
from hpo.masking import mask_secrets
from hpo.runtime import Stopped

COMMANDS = {
    "validate": cmd_validate,
    "run": cmd_run,
    "worker": cmd_worker,
    "best": cmd_best,
    "export": cmd_export,
    "probe": cmd_probe,
    "enqueue": cmd_enqueue,
    "train": cmd_train,
    "doctor": cmd_doctor,
    "dashboard": cmd_dashboard,
    "report": cmd_report,
    "gpu-check": cmd_gpu_check,
}


def build_parser():
    from hpo.app.parser import build_parser as build

    return build(COMMANDS)


def _quiet_libraries() -> None:
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # the profiler's start/stop lines are noise here
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # hpo prints its own line per trial
    mask_library_logs("optuna")  # what Optuna and a library without a handler print is masked too
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # --help and --version exit here, before any import
    _quiet_libraries()
    set_verbosity(logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.INFO)
    try:
        return int(args.func(args))
    except UserInputError as exc:
        one_line = " ".join(str(exc).split())  # the contract is one line, whatever the message held
        print(f"hpo {args.command}: error: {mask_secrets(one_line)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("hpo: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except Stopped as stop:  # a worker stopped by Ctrl-C or SIGTERM: its trial is failed and queued for a retry
        print(f"hpo: {stop.verdict.kind.value}", file=sys.stderr)
        return int(stop.code)
    except Exception as exc:  # noqa: BLE001 - one code per meaning: not Python's 1, which means "no trial trained"
        return _unexpected(args.command, exc)


def _unexpected(command: str, exc: Exception) -> int:
    """A storage that failed mid-command exits 3 in one line; anything else is a bug in hpo: its
    traceback (masked: a frame's line or the message may quote the storage URL), then exit 70."""
    if _is_storage_error(exc):
        print(f"hpo {command}: error: the storage failed ({first_line(exc)})", file=sys.stderr)
        return ExitCode.STORAGE_UNREACHABLE
    print(mask_secrets("".join(traceback.format_exception(exc))), end="", file=sys.stderr)
    print(
        f"hpo {command}: internal error (exit {int(ExitCode.INTERNAL_ERROR)}): please report the traceback above", file=sys.stderr
    )
    return ExitCode.INTERNAL_ERROR


def _is_storage_error(exc: Exception) -> bool:
    # Only a command that opened a storage can raise one, so its modules are loaded then: no import here.
    sa, optuna_exc = sys.modules.get("sqlalchemy.exc"), sys.modules.get("optuna.exceptions")
    kinds = ([sa.SQLAlchemyError] if sa else []) + ([optuna_exc.StorageInternalError] if optuna_exc else [])
    return isinstance(exc, tuple(kinds))


if __name__ == "__main__":
    sys.exit(main())
