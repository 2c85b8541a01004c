"""What `scripts/gpu-session` runs, step by step, and what it keeps of each step.

1. install the carried wheels; 2. the environment and `hpo doctor`; 3. correctness, in parallel:
gpu-check streams over the knob matrix and a joint study of search_spaces/gpu.yaml; 4.-6. timing,
each step alone on the GPU: the knob benchmark, hpo against a hand-written loop on
benchmarks/configs/big.yaml (its hpo side also gives big.yaml's eager MFU) and big.yaml compiled;
7. a probe_first study of the same space, alone (its opening sweep ranks by speed).

The caps add up to less than the session's budget, which the runner also enforces, so one device
call ends inside 8 minutes. `toy=True` runs every step at toy size on the CPU, for the tests.
Standard library only, like the runner.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.gpu_session import Run, Step
from benchmarks.gpu_session_streams import STREAMS, stream_args

__all__ = ["BUDGET_S", "Plan"]

BUDGET_S = 450.0  # the whole session; a device call allows 8 minutes and needs some for its own start
KNOB_SHAPE = ["d_model=768", "n_layers=6", "n_heads=12", "seq_len=512"]  # the H200 run's knob benchmark
TOY_WORKLOAD = "benchmarks.gpu_session_toy:ToyCausalLM"  # the studies' toy model (gpu_session_streams.py has its own)
TOY_SLOWER = 4


def _replace(text: str, old: str, new: str) -> str:
    if old not in text:
        raise ValueError(f"gpu-session: expected {old!r} in the file it edits")
    return text.replace(old, new)


class Plan:
    """The steps of one session; each writes under `work` and keeps its results under `out`."""

    def __init__(self, repo: Path, out: Path, work: Path, kind: str, wheels: Path | None, toy: bool):
        self.repo, self.out, self.work, self.kind, self.wheels, self.toy = repo, out, work, kind, wheels, toy
        self.py = sys.executable
        self.site = work / "site"
        self.gpu_check_rows = out / f"gpu-check-{kind}.jsonl"
        self.knobs = out / f"knobs-causal_lm-{kind}.json"
        self.vs_bare = out / f"vs-bare-big-{kind}.json"
        work.mkdir(parents=True, exist_ok=True)

    def _cap(self, seconds: float) -> float:
        """A step's limit: toy steps share a busy CPU, and check what runs, not how fast."""
        return seconds * TOY_SLOWER if self.toy else seconds

    def hpo(self, *args: str, stdout: Path | None = None, stderr_too: bool = False) -> Run:
        return Run((self.py, "-m", "hpo", *args), stdout, stderr_too)

    def script(self, name: str, *args: str) -> Run:
        return Run((self.py, str(self.repo / "scripts" / name), *args))

    def steps(self) -> list[Step]:
        timing = [self.knob_bench(), self.against_bare(), self.compiled()]
        return [self.install(), self.environment(), self.correctness(), *timing, self.probe_first()]

    # ---- 1, 2: install and environment -------------------------------------------------------

    def install(self) -> Step:
        wheels = sorted(str(w) for w in self.wheels.glob("*.whl")) if self.wheels else []
        pip = (self.py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir")
        argv = (*pip, "--upgrade", "--target", str(self.site), *wheels) if wheels else (self.py, "-c", "print('no wheels')")
        what = f"{len(wheels)} carried wheels from {self.wheels.name if self.wheels else 'no folder'}/ into {self.site}"
        return Step("install", what, self._cap(30), ((Run(argv),),))

    def environment(self) -> Step:
        probe = (
            "import json, sys, torch, importlib.metadata as m; "
            "names = ('optuna', 'sqlalchemy', 'pydantic', 'transformers', 'lightning', 'cmaes'); "
            "print('ENV ' + json.dumps({'python': sys.version.split()[0], 'torch': torch.__version__, "
            "'cuda': torch.version.cuda, 'cudnn': torch.backends.cudnn.version(), "
            "'device': torch.cuda.get_device_name() if torch.cuda.is_available() else None, "
            "'packages': {n: m.version(n) for n in names}}))"
        )
        env_out, doctor_out = self.work / "env.txt", self.work / "doctor.txt"
        jobs = ((Run((self.py, "-c", probe), env_out),), (self.hpo("doctor", stdout=doctor_out),))

        def collect(record: dict) -> None:
            line = next(ln for ln in env_out.read_text().splitlines() if ln.startswith("ENV "))
            record["meta"] |= json.loads(line.removeprefix("ENV "))
            record["doctor"] = doctor_out.read_text()

        return Step("environment", "versions, the GPU, hpo doctor", self._cap(25), jobs, collect=collect)

    # ---- 3: correctness, in parallel ---------------------------------------------------------

    def correctness(self) -> Step:
        streams = list(STREAMS)[:2] if self.toy else list(STREAMS)  # two toy streams show the parallel merge
        jobs = [
            (self.script("gpu-check", *stream_args(name, self.toy), "--out-dir", str(self.work / f"gc-{name}")),)
            for name in streams
        ]
        jobs.append(self._study("joint", self._space("joint")))

        def merge() -> None:
            rows = []
            for name in streams:
                for path in sorted((self.work / f"gc-{name}").glob("*.jsonl")):
                    rows += [
                        {"stream": name, **json.loads(ln)} for ln in path.read_text().splitlines() if ln.strip().endswith("}")
                    ]
            self.gpu_check_rows.write_text("".join(json.dumps(r) + "\n" for r in rows))

        collect = lambda record: record.__setitem__("joint", self._study_result("joint"))
        what = f"gpu-check streams {', '.join(streams)} and a joint study, in parallel"
        return Step("correctness", what, self._cap(130), tuple(jobs), collect=collect, poll=merge)

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
        return Step("knobs", "each knob against fp32/eager/for-loop (scripts/bench-knobs)", self._cap(55), ((command,),))

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
            keys = ("train_samples_per_s", "mfu", "achieved_tflops", "peak_mem_mb", "probe_s", "trial_s", "peak_tflops")
            record["compiled"] = {"verdict": trial.get("verdict"), "knobs_observed": trial.get("knobs_observed")} | {
                k: attrs.get(k) for k in keys
            }

        return Step(
            "compiled", f"{config.name} under torch.compile: MFU (hpo train)", self._cap(60), ((command,),), collect=collect
        )

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
        return Step(
            "probe_first",
            "a probe_first study of search_spaces/gpu.yaml, alone",
            10_000,
            (self._study("probe_first", self._space("probe_first")),),
            collect=collect,
        )

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
        }
