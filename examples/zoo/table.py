"""Probe every zoo model against every knob value, check that each precision trains it, and write
the results: a JSON under benchmarks/results/ after each model (nothing is lost when a time cap or
a lent machine's end cuts the run), then the page docs/zoo.md from that JSON.

    python -m examples.zoo.table                          # this CPU, every model; compile on COMPILED only
    python -m examples.zoo.table --device cuda --time-cap 240 --compile-models all
    python -m examples.zoo.table --render benchmarks/results/zoo-cpu-avx512bf16.json   # the page only

Values this machine cannot run (by hpo doctor's check) are listed with why, not probed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

from examples.zoo.matrix import BATCH_SIZE, knob_values, probe_model, runnable_here
from examples.zoo.models import ZOO
from examples.zoo.render import render
from examples.zoo.trains import STEPS, loss_drop

__all__ = ["COMPILED", "main", "run"]

ROOT = Path(__file__).resolve().parents[2]
# torch.compile (inductor) costs 10-40 s a model on a CPU: by default the table and CI compile these.
COMPILED = ("vit", "lit_convnet")
PRECISIONS = ("fp32", "bf16", "fp16")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m examples.zoo.table", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--time-cap", type=float, default=None, help="seconds: start no model after this; the JSON keeps those done")
    p.add_argument("--models", default="all", help=f"comma-separated, of: {', '.join(ZOO)} (default all)")
    p.add_argument("--compile-models", default=",".join(COMPILED), help="models probed with compile=default too; 'all' or 'none'")
    p.add_argument("--no-trains", action="store_true", help="skip the check that each precision trains the model")
    p.add_argument("--json", type=Path, help="default benchmarks/results/zoo-<host kind>.json")
    p.add_argument("--markdown", type=Path, default=ROOT / "docs" / "zoo.md", help="the page written from the JSON")
    p.add_argument("--render", type=Path, help="write the page from this JSON and stop")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what the page says generated it
    return args


def _names(arg: str) -> list[str]:
    if arg in ("all", "none"):
        return list(ZOO) if arg == "all" else []
    names = [n for n in arg.split(",") if n]
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        raise SystemExit(f"--models/--compile-models: unknown model {unknown[0]!r}; use one of {', '.join(ZOO)}, all or none")
    return names


def _host(device: torch.device) -> dict:
    from benchmarks.host import cpu_info, gpu_info, host_kind

    cpu = cpu_info()
    cuda = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {"host_kind": host_kind(cpu["cpu_flags"], cuda), "torch": torch.__version__, **cpu, **(gpu_info() if cuda else {})}


def run(args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    host = _host(device)
    path = args.json or ROOT / "benchmarks" / "results" / f"zoo-{host['host_kind']}.json"
    compiled = set(_names(args.compile_models))
    values, not_here = runnable_here(knob_values(), device)
    result = {
        "command": " ".join(["python -m examples.zoo.table", *args.argv]),
        "host": host,
        "batch_size": BATCH_SIZE,
        "trains_steps": STEPS,
        "not_runnable": [{"knob": k, "value": v, "why": why} for (k, v), why in not_here.items()],
        "compiled_models": sorted(compiled),
        "models": {},
        "stopped": None,
    }
    start = time.perf_counter()
    for name in _names(args.models):
        if args.time_cap is not None and time.perf_counter() - start >= args.time_cap:
            result["stopped"] = f"time cap of {args.time_cap:g} s reached after {len(result['models'])} models"
            break
        result["models"][name] = _model_entry(
            name, values if name in compiled else [v for v in values if v[0] != "compile"], device, args
        )
        _write(path, result)
        print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    _write(path, result)
    args.markdown.write_text(render(result))
    return result


def _model_entry(name: str, values, device: torch.device, args: argparse.Namespace) -> dict:
    model = ZOO[name]
    try:
        rows = [dataclasses.asdict(row) for row in probe_model(model, values, device)]
    except Exception as exc:  # noqa: BLE001 - a model that cannot be built here (a package missing) must not cost the others
        return {"workload": model.workload, "family": model.family, "error": _error(exc)}
    trains = {} if args.no_trains else _trains(model, device)
    return {"workload": model.workload, "family": model.family, "rows": rows, "trains": trains}


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"


def _trains(model, device: torch.device) -> dict:
    out = {}
    for precision in PRECISIONS:
        try:
            out[precision] = dataclasses.asdict(loss_drop(model, precision, device))
        except Exception as exc:  # noqa: BLE001 - recorded beside the others: a GPU session keeps going
            out[precision] = {"error": _error(exc)}
    return out


def _write(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str) + "\n")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render is not None:
        args.markdown.write_text(render(json.loads(args.render.read_text())))
        return 0
    run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
