"""What `scripts/gpu-session` runs, step by step, and what it keeps of each step.

1. install the carried wheels; 2. the environment and `hpo doctor`; 3. correctness, in parallel:
gpu-check streams over the knob matrix, a joint study of search_spaces/gpu.yaml, trials of ranks
over NCCL (scripts/bench-parallel, one rank per GPU), the model zoo and a short loader stream
(scripts/bench-loader on png_images, pin_memory false and true); 4.-6. timing,
each step alone on the GPU: the knob benchmark, hpo against a hand-written loop on
benchmarks/configs/big.yaml (its hpo side also gives big.yaml's eager MFU) and big.yaml compiled;
7. a probe_first study of the same space, alone (its opening sweep ranks by speed).

The caps are sized from the H200 run's measured times (H200_S) times MARGIN, so that the rows that
take longest there (a combination's first call, a compiled trial) fit with room to spare. They add up
to less than the session's budget, which the runner also enforces, so one device call ends inside
its 10 minutes. `toy=True` runs every step at toy size on the CPU, for the tests. Standard library
only, like the runner.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.gpu_session import Run, Step, broken_step
from benchmarks.gpu_session_streams import STREAMS, stream_args, stream_size

__all__ = ["BUDGET_S", "H200_S", "MARGIN", "Plan", "caps"]

# The whole session: a device call may run 600 s; the rest is the script's own start and last write.
BUDGET_S = 560.0
# Seconds measured on the H200 (2026-11-26, docs/benchmarks/gpu.md; /work/shared/gpu/2026-11-26-h200).
H200_S = {
    "combination": 13.3,  # one gpu-check combination in its own process, its start included: 18 in 240 s
    "compile": 15.0,  # what compiling adds to a combination: probe 13.8-15.0 s compiled, about 1 s eager
    "start": 12.0,  # a fresh hpo process before its trial: a combination's 13.3 s less its probe and 5 steps
    "compiled_trial": 39.7,  # big.yaml under compile: default with cold caches, hpo train's trial_s
}
MARGIN = 1.5  # over the H200's times: another GPU (the default kind is an H100) may be slower
KNOB_SHAPE = ["d_model=768", "n_layers=6", "n_heads=12", "seq_len=512"]  # the H200 run's knob benchmark
TOY_WORKLOAD = "benchmarks.gpu_session_toy:ToyCausalLM"  # the studies' toy model (gpu_session_streams.py has its own)
TOY_SLOWER = 4
LOCK = "hpo:probe_first:sweeper"  # hpo.strategy.LOCK_ATTR (this runner imports no hpo): {"host", "pid", "at"}
ZOO_SHARE = 0.7  # of the correctness step's cap: the zoo starts no model later, and one model's probes fit the rest
LOADER_SHARE = 0.6  # of the same cap: the loader stream starts no setting later (one png_images trial: about 4 s on a CPU)
MEMORY_SHARE = 0.6  # of the same cap: the memory budget starts no row later (one big.yaml trial: about 30 s on the H200)
PARALLEL_SHARE = 0.6  # of the same cap: the ranks' stream starts no trial later (never run on a GPU yet: no time measured)


def _replace(text: str, old: str, new: str) -> str:
    if old not in text:
        raise ValueError(f"gpu-session: expected {old!r} in the file it edits")
    return text.replace(old, new)


class Plan:
    """The steps of one session; each writes under `work` and keeps its results under `out`."""

    def __init__(self, repo: Path, out: Path, work: Path, kind: str, wheels: Path | None, toy: bool):
        self.repo, self.out, self.work, self.kind, self.toy = repo, out, work, kind, toy
        self.wheels = wheels.resolve() if wheels else None  # the steps run in `work`, not where it was named
        self.py = sys.executable
        self.site = work / "site"
        self.gpu_check_rows = out / f"gpu-check-{kind}.jsonl"
        self.knobs = out / f"knobs-causal_lm-{kind}.json"
        self.vs_bare = out / f"vs-bare-big-{kind}.json"
        self.zoo = out / f"zoo-{kind}.json"
        self.loader = out / f"loader-{kind}.json"
        self.memory = work / "memory.json"  # into the session's JSON: the call brings back at most 8 files
        self.parallel = work / "parallel.json"  # the same
        work.mkdir(parents=True, exist_ok=True)

    def _cap(self, seconds: float) -> float:
        """A step's limit: toy steps share a busy CPU, and check what runs, not how fast."""
        return seconds * TOY_SLOWER if self.toy else seconds

    def hpo(self, *args: str, stdout: Path | None = None, stderr_too: bool = False) -> Run:
        return Run((self.py, "-m", "hpo", *args), stdout, stderr_too)

    def script(self, name: str, *args: str) -> Run:
        return Run((self.py, str(self.repo / "scripts" / name), *args))

    def steps(self) -> list[Step]:
        """Every step; one that cannot be built (a file it edits changed) fails alone."""
        builders: list[tuple[str, Callable[[], Step]]] = [
            ("install", self.install),
            ("environment", self.environment),
            ("correctness", self.correctness),
            ("knobs", self.knob_bench),
            ("vs-bare", self.against_bare),
            ("compiled", self.compiled),
            ("probe_first", self.probe_first),
        ]
        steps = []
        for name, build in builders:
            try:
                steps.append(build())
            except Exception as exc:  # noqa: BLE001 - the other steps still run
                steps.append(broken_step(name, exc))
        return steps

    # ---- 1, 2: install and environment -------------------------------------------------------

    def install(self) -> Step:
        """The carried wheels into `site`. No folder asked for (--toy): nothing to do. A folder asked
        for but absent or empty (a forgotten carry) fails the step, and the report says so."""
        wheels = sorted(str(w) for w in self.wheels.glob("*.whl")) if self.wheels and self.wheels.is_dir() else []
        pip = (self.py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir")
        if wheels:
            argv = (*pip, "--upgrade", "--target", str(self.site), *wheels)
        elif self.wheels is None:
            argv = (self.py, "-c", "print('no wheels asked for: this Python has the packages')")
        else:
            argv = (self.py, "-c", f"import sys; sys.exit({self.missing_wheels()!r})")
        what = f"{len(wheels)} carried wheels from {self.wheels.name if self.wheels else 'no folder'}/ into {self.site}"
        return Step("install", what, self._cap(30), ((Run(argv),),))

    def missing_wheels(self) -> str | None:
        """The report's line for a wheels folder that was asked for and not carried, else None."""
        if self.wheels is None or (self.wheels.is_dir() and any(self.wheels.glob("*.whl"))):
            return None
        return f'wheels: no *.whl in {self.wheels}: not carried? (the device call needs carry: [".gpu-wheels"])'

    def environment(self) -> Step:
        env_out, doctor_out = self.work / "env.txt", self.work / "doctor.txt"
        jobs = ((Run((self.py, "-m", "benchmarks.gpu_session_env"), env_out),), (self.hpo("doctor", stdout=doctor_out),))

        def collect(record: dict) -> None:
            record["doctor"] = doctor_out.read_text(errors="replace") if doctor_out.is_file() else ""
            text = env_out.read_text(errors="replace") if env_out.is_file() else ""
            line = next((ln for ln in text.splitlines() if ln.startswith("ENV ")), None)
            if line is None:  # killed at its limit before it printed, or Python itself failed
                record["missing"].append("environment: the probe printed nothing (the log has its output)")
                return
            env = json.loads(line.removeprefix("ENV "))
            record["meta"] |= env
            record["missing"] += environment_missing(env, toy=self.toy)

        # A cold machine's first torch import and CUDA start-up: the H200 session's start, with the margin.
        return Step("environment", "versions, the GPU, hpo doctor", self._cap(45), jobs, collect=collect)

    # ---- 3: correctness, in parallel ---------------------------------------------------------

    def correctness(self) -> Step:
        streams = list(STREAMS)[:2] if self.toy else list(STREAMS)  # two toy streams show the parallel merge
        jobs = [
            (self.script("gpu-check", *stream_args(name, self.toy), "--out-dir", str(self.work / f"gc-{name}")),)
            for name in streams
        ]
        jobs.append(self._study("joint", self._space("joint")))
        jobs.append((self._memory(),))
        jobs.append((self._parallel(),))
        jobs.append((self._zoo(),))
        jobs.append((self._loader(),))

        def merge() -> None:
            rows = []
            for name in streams:
                for path in sorted((self.work / f"gc-{name}").glob("*.jsonl")):
                    rows += [
                        {"stream": name, **json.loads(ln)} for ln in path.read_text().splitlines() if ln.strip().endswith("}")
                    ]
            self.gpu_check_rows.write_text("".join(json.dumps(r) + "\n" for r in rows))

        def collect(record: dict) -> None:
            record["joint"] = self._study_result("joint")
            record["memory"] = _without_meta(self.memory)
            record["parallel"] = _without_meta(self.parallel)

        what = (
            f"gpu-check streams {', '.join(streams)}, a joint study, the memory budget, trials of ranks over NCCL, the model zoo "
            "and the loader stream, in parallel"
        )
        return Step("correctness", what, self._cap(caps()["correctness"]), tuple(jobs), collect=collect, poll=merge)

    def _zoo(self) -> Run:
        """The model zoo (scripts/zoo-table): every zoo model x every knob value the GPU runs, and
        whether each precision trains it; no compile (the compiled step has its own). It starts no
        model past ZOO_SHARE of the step's cap and writes its JSON after each model, so what it
        measured comes back when the step's cap ends it."""
        cap = ZOO_SHARE * self._cap(caps()["correctness"])
        args = ["--device", "cpu", "--models", "causal_lm,resnet", "--no-trains"] if self.toy else ["--device", "cuda"]
        args += [
            "--time-cap",
            f"{cap:.0f}",
            "--compile-models",
            "none",
            "--json",
            str(self.zoo),
            "--markdown",
            str(self.work / "zoo.md"),
        ]
        return self.script("zoo-table", *args)

    def _memory(self) -> Run:
        """The memory budget (scripts/bench-memory): big.yaml under half the device with `batch_size:
        auto`, checkpointing on then off, then checkpointing's batch without it (rejected before
        training, if the model is right). Beside the other jobs its samples/s compare its own rows
        only; the predicted against measured peaks do not depend on them (each process's own
        allocator peak). It starts no row past MEMORY_SHARE of the step's cap."""
        cap = MEMORY_SHARE * self._cap(caps()["correctness"])
        if self.toy:
            config = self.repo / "benchmarks" / "configs" / "tiny.yaml"
            size = ["--limit", "1.5", "--precision", "fp32", "--max-batch", "32", "--steps", "2"]
        else:
            config = self.repo / "benchmarks" / "configs" / "big.yaml"
            size = ["--limit", "half", "--precision", "bf16", "--max-batch", "256", "--multiple-of", "16", "--steps", "8"]
        argv = ["--config", str(config), *size, "--time-cap", f"{cap:.0f}", "--out", str(self.memory)]
        return self.script("bench-memory", *argv)

    def _parallel(self) -> Run:
        """Trials of ranks (scripts/bench-parallel): on CUDA over NCCL, one rank per visible GPU, so
        a one-GPU machine runs one rank through NCCL's group and a host with several GPUs the DDP
        and FSDP2 rows; the toy run, two rows over gloo. Beside the other jobs its samples/s say
        that the path runs and what crossed the wire, not how fast. It starts no trial past
        PARALLEL_SHARE of the step's cap and writes its JSON after each trial."""
        cap = PARALLEL_SHARE * self._cap(caps()["correctness"])
        size = ["--device", "cpu", "--toy", "--steps", "3"] if self.toy else ["--device", "cuda", "--steps", "12"]
        return self.script("bench-parallel", *size, "--rounds", "1", "--time-cap", f"{cap:.0f}", "--out", str(self.parallel))

    def _loader(self) -> Run:
        """A short loader stream (scripts/bench-loader): png_images per loader setting, on CUDA each
        with pin_memory false and true (pinned batches copy non-blocking). It runs beside the other
        correctness jobs, so its samples/s compare settings with each other, not with an idle GPU;
        it starts no setting past LOADER_SHARE of the step's cap and writes its JSON after each."""
        cap = LOADER_SHARE * self._cap(caps()["correctness"])
        size = ["--steps", "2", "--images", "128", "--size", "32"] if self.toy else ["--steps", "20", "--images", "256"]
        device = "cpu" if self.toy else "cuda"
        return self.script("bench-loader", "--device", device, *size, "--time-cap", f"{cap:.0f}", "--out", str(self.loader))

    # ---- 4-6: timing, each alone --------------------------------------------------------------

    def knob_bench(self) -> Step:
        if self.toy:
            args = [
                "--steps",
                "3",
                "--repeats",
                "1",
                "--batch-size",
                "4",
                "--overhead-steps",
                "3",
                "--configs",
                "fused",
                "--device",
                "cpu",
            ]
            args += [
                a for o in ("d_model=32", "n_layers=1", "n_heads=2", "seq_len=32", "eval_batches=1") for a in ("--option", o)
            ]
        else:
            args = ["--steps", "30", "--repeats", "2", "--batch-size", "16", "--configs", "sdpa,fused,bf16,bf16+sdpa+fused"]
            args += [a for o in KNOB_SHAPE for a in ("--option", o)]
        command = self.script("bench-knobs", "--workload", "causal_lm", *args, "--out", str(self.knobs))
        return Step("knobs", "each knob against fp32/eager/for-loop (scripts/bench-knobs)", self._cap(60), ((command,),))

    def against_bare(self) -> Step:
        config = self._config(compiled=False)
        args = ["--repeats", "1", "--warmup", "3", "--device", "cpu"] if self.toy else ["--repeats", "2", "--timeout", "45"]
        command = self.script("bench-vs-bare", "--config", str(config), *args, "--out", str(self.vs_bare))
        return Step(
            "vs-bare", f"hpo against a hand-written loop on {config.name} (scripts/bench-vs-bare)", self._cap(95), ((command,),)
        )

    def compiled(self) -> Step:
        config, result = self._config(compiled=True), self.work / "compiled.json"
        command = self.hpo("train", str(config), "--json", stdout=result)

        def collect(record: dict) -> None:
            trial = json.loads(result.read_text())
            attrs = trial.get("user_attrs", {})
            keys = (
                "train_samples_per_s",
                "steady_samples_per_s",
                "mfu",
                "achieved_tflops",
                "peak_mem_mb",
                "probe_s",
                "trial_s",
                "peak_tflops",
            )
            record["compiled"] = {"verdict": trial.get("verdict"), "knobs_observed": trial.get("knobs_observed")} | {
                k: attrs.get(k) for k in keys
            }

        what = f"{config.name} under torch.compile: MFU (hpo train)"
        return Step("compiled", what, self._cap(caps()["compiled"]), ((command,),), collect=collect)

    def _config(self, compiled: bool) -> Path:
        source = self.repo / "benchmarks" / "configs" / ("tiny.yaml" if self.toy else "big.yaml")
        text = source.read_text()
        if self.toy:
            text = _replace(text, "max_steps: 60, eval_every: 60", "max_steps: 8, eval_every: 8")
        if compiled:
            text = _replace(
                text, "compile: false}", "compile: default, compile_backend: eager}" if self.toy else "compile: default}"
            )
        path = self.work / (source.stem + ("-compiled" if compiled else "") + ".yaml")
        path.write_text(text)
        return path

    # ---- 7: probe_first, alone; the studies' results -------------------------------------------

    def probe_first(self) -> Step:
        collect = lambda record: record.__setitem__("probe_first", self._study_result("probe_first"))
        what = "a probe_first study of search_spaces/gpu.yaml, alone"
        return Step("probe_first", what, None, (self._study("probe_first", self._space("probe_first")),), collect=collect)

    def _space(self, strategy: str) -> Path:
        text = (self.repo / "search_spaces" / "gpu.yaml").read_text()
        text = _replace(text, "strategy: joint", f"strategy: {strategy}")
        if self.toy:
            text = _replace(text, "n_trials: 8", "n_trials: 2")
            text = _replace(text, "name: causal_lm", f"name: {TOY_WORKLOAD}")
            text = _replace(text, "budget_s: 4", "budget_s: 1")
            text = _replace(text, "\n  d_model: 512\n  n_layers: 4\n  seq_len: 256\n  n_heads: 8\n", "\n")
            text = _replace(text, "batch_size: 32", "batch_size: 4")
            text = _replace(text, "precision: [fp32, bf16, fp16]", "precision: fp32")
            text = _replace(text, "[eager, sdpa, sdpa_flash, sdpa_efficient, sdpa_cudnn, xformers, flash_attn]", "[eager, sdpa]")
            text = _replace(text, "[forloop, foreach, fused, apex]", "[forloop, fused]")
            text = _replace(text, "grad_checkpointing: [false, true]", "grad_checkpointing: false") + "  device: cpu\n"
        path = self.work / f"gpu-{strategy}.yaml"
        path.write_text(text)
        return path

    def _study(self, strategy: str, space: Path) -> tuple:
        storage = f"sqlite:///{self.work / f'{strategy}.db'}"
        name = f"gpu-{strategy}"
        run = self.hpo(
            "run", str(space), "--study", name, "--storage", storage, stdout=self.work / f"{strategy}-run.txt", stderr_too=True
        )
        best = self.hpo("best", "--study", name, "--storage", storage, "--json", stdout=self.work / f"{strategy}-best.json")
        return (run, best)

    def _study_result(self, strategy: str) -> dict:
        lines = (self.work / f"{strategy}-run.txt").read_text(errors="replace").splitlines()
        trials = [ln for ln in lines if ln.startswith("trial #")]
        best_path = self.work / f"{strategy}-best.json"
        best = json.loads(best_path.read_text()) if best_path.is_file() and best_path.stat().st_size else None
        keep = ("number", "verdict", "values", "knobs_requested", "knobs_observed")
        return {
            "trials": trials,
            "sweep": [ln for ln in lines if "sweep" in ln][:5],
            "best": [{k: t.get(k) for k in keep} for t in best or []],
            "sweep_share": sweep_share(self.work / f"{strategy}.db") if strategy == "probe_first" else None,
        }


def sweep_share(db: Path) -> dict | None:
    """The opening sweep's share of a probe_first study (issue 38), read from its SQLite file: from
    when the sweeper took its lock to the first trial's start, over that lock to the last trial's
    end. None before any trial started. Optuna stores naive local times, the lock an epoch time."""
    import datetime
    import sqlite3

    if not db.is_file():
        return None
    with contextlib.closing(sqlite3.connect(db)) as con:
        locks = [json.loads(v) for k, v in con.execute("SELECT key, value_json FROM study_user_attributes") if k.startswith(LOCK)]
        starts = [s for (s,) in con.execute("SELECT datetime_start FROM trials WHERE datetime_start IS NOT NULL")]
        ends = [e for (e,) in con.execute("SELECT datetime_complete FROM trials WHERE datetime_complete IS NOT NULL")]
    if not locks or not starts:
        return None
    epoch = lambda text: datetime.datetime.fromisoformat(text).timestamp()
    began = min(lock["at"] for lock in locks)
    sweep = min(map(epoch, starts)) - began
    whole = max(map(epoch, ends or starts)) - began
    return {"sweep_s": round(sweep, 1), "study_s": round(whole, 1), "share": round(sweep / whole, 3) if whole > 0 else None}


def _without_meta(path: Path) -> dict | None:
    """A benchmark's JSON without its run metadata (the session records its own), None if absent or cut mid-write."""
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    result.pop("meta", None)
    return result


def caps() -> dict[str, float]:
    """The limits of the steps that ran longest on the H200, from its times (H200_S) times MARGIN:
    correctness as long as its longest stream (each combination a fresh process, a compiled one
    also compiling), compiled as big.yaml's cold compiled trial plus the process's start."""
    longest = max(
        n * H200_S["combination"] + (n if "--compile" in STREAMS[name] else 0) * H200_S["compile"]
        for name, n in ((name, stream_size(name)) for name in STREAMS)
    )
    return {
        "correctness": math.ceil(MARGIN * longest),
        "compiled": math.ceil(MARGIN * (H200_S["start"] + H200_S["compiled_trial"])),
    }


def environment_missing(env: dict, toy: bool) -> list[str]:
    """One line for each thing the environment probe found missing: torch, the GPU, a package."""
    lines = []
    if env.get("torch") is None:
        lines.append(f"torch: does not import ({env.get('torch_error')})")
    elif env.get("device") is None and not toy:
        lines.append(f"GPU: torch sees none ({env.get('cuda_error') or 'torch.cuda.is_available() is False'})")
    lines += [f"package {name}: not installed" for name, version in env.get("packages", {}).items() if version is None]
    return lines
