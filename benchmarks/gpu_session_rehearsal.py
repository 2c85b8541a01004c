"""A rehearsal of the device call on this CPU: `scripts/gpu-session --toy` run as the GPU machine
would run it, in a bare environment. A fresh venv holding only torch, a copy of the tree as the
device tool sends it (tracked and unignored files, no .git), no git on PATH, no network (a network
namespace of its own, `unshare -rn`). Twice: with the carried wheels folder, then without it. It
reports which of the session's files came back each time and what the session said was missing.

    .venv/bin/python -m benchmarks.gpu_session_rehearsal            # about 2 minutes on 2 busy cores
    .venv/bin/python -m benchmarks.gpu_session_rehearsal --json R   # also write the report as JSON

Nothing is downloaded. The venv holds this environment's torch and the packages torch requires,
linked in; the wheels are this environment's installed copies of what `benchmarks.gpu_wheels`
lists, plus what the GPU machine's image has that the toy session needs beyond torch (IMAGE_HAS),
each zipped back into a wheel from the files its RECORD lists: the same versions the wheels for the
GPU machine pin, built for this Python.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from pathlib import Path

from benchmarks.gpu_wheels import _needed, normalize, wheel_list

__all__ = ["rehearse"]

REPO = Path(__file__).resolve().parents[1]
# What the GPU machine's image holds (gpu_wheels.MACHINE_HAS) that the toy session imports.
IMAGE_HAS = ("pyyaml", "numpy", "tqdm", "packaging", "scipy")
# The toy steps that fit a rehearsal of 1-2 minutes a run; the slow toy test runs the others.
STEPS = "install,environment,knobs,compiled"


def _sh(argv: list, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], check=True, text=True, **kw)


def _closure(names: list[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions `names` name and everything they require, each once."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = normalize(todo.pop())
        if name in found:
            continue
        found[name] = importlib.metadata.distribution(name)
        todo += [n for n in (_needed(r) for r in found[name].requires or ()) if n]
    return list(found.values())


def _top_level(dist: importlib.metadata.Distribution) -> set[str]:
    return {str(f).split("/")[0] for f in dist.files or () if not str(f).startswith("..")}


def bare_venv(path: Path) -> Path:
    """A venv (pip and nothing else) that sees only torch and what torch requires: those are linked
    from this environment into a folder its .pth names."""
    python = path / "bin" / "python"
    if python.exists():
        return python
    _sh([sys.executable, "-m", "venv", "--clear", path])
    linked = path / "torch-only"
    linked.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for dist in _closure(["torch"]):
        for name in _top_level(dist):
            if (site / name).exists() and not (linked / name).exists():
                (linked / name).symlink_to(site / name)
    venv_site = next((path / "lib").glob("python3*/site-packages"))
    (venv_site / "torch-only.pth").write_text(f"{linked}\n")
    return python


def wheels_for(folder: Path) -> Path:
    """The carried wheels, for this Python: each distribution's installed files zipped back into a
    wheel (its dist-info holds WHEEL and RECORD, which is all pip reads)."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.whl"):
        old.unlink()
    for name in [*wheel_list(), *IMAGE_HAS]:
        dist = importlib.metadata.distribution(name)
        base = Path(dist.locate_file(""))
        wheel = folder / f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
            for f in dist.files or ():
                if not str(f).startswith("..") and (base / f).is_file() and "__pycache__" not in str(f):
                    zf.write(base / f, str(f))
    return folder


def tree_copy(dest: Path) -> Path:
    """The files the device tool sends: tracked and untracked-but-not-ignored, without .git."""
    files = _sh(["git", "-C", REPO, "ls-files", "-co", "--exclude-standard"], capture_output=True).stdout.splitlines()
    for name in files:
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def isolated(argv: list[str]) -> tuple[list[str], str]:
    """`argv` without network: its own network namespace where the kernel allows one."""
    unshare = shutil.which("unshare")  # found here: the run's own PATH holds python3 alone
    probe = subprocess.run([unshare, "-rn", "true"], capture_output=True) if unshare else None
    if probe is not None and probe.returncode == 0:
        return [unshare, "-rn", *argv], "no network (unshare -rn: a network namespace with no interface up)"
    return argv, "network NOT cut: unshare -rn is not allowed here; the proxies point nowhere instead"


def run_once(python: Path, wheels: Path | None, work: Path, budget: float) -> dict:
    tree, out, bin_dir = tree_copy(work / "tree"), work / "out", work / "bin"
    bin_dir.mkdir()
    # The PATH holds python3 and nothing else: no git. A wrapper, not a symlink: a venv's Python
    # finds its pyvenv.cfg beside the path it was started by.
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{python}" "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    if wheels is not None:
        shutil.copytree(wheels, tree / ".gpu-wheels")
    env = {"PATH": str(bin_dir), "HOME": str(work), "OUT": str(out), "LANG": "C.UTF-8"}
    env |= {"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}  # only used without unshare
    command = ["python3", "scripts/gpu-session", "--toy", "--commit", "rehearse", "--wheels", ".gpu-wheels"]
    command += ["--only", STEPS, "--budget", str(budget)]
    argv, network = isolated(command)
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=budget + 120)
    files = sorted(p.name for p in out.glob("*")) if out.is_dir() else []
    record_path = next((out / f for f in files if f.startswith("gpu-session-") and f.endswith(".json")), None)
    record = json.loads(record_path.read_text()) if record_path else {}
    return {
        "wheels": wheels is not None,
        "network": network,
        "rc": proc.returncode,
        "wall_s": round(time.monotonic() - start, 1),
        "files": files,
        "steps": {s["step"]: s["result"] for s in record.get("steps", [])},
        "missing": record.get("missing"),
        "commits": {f: json.loads((out / f).read_text()).get("meta", {}).get("commit") for f in files if f.endswith(".json")},
        "stderr_tail": proc.stderr[-1500:],
        "log_tail": (out / record_path.with_suffix(".log").name).read_text()[-3000:] if record_path else "",
    }


def rehearse(budget: float = 400.0) -> list[dict]:
    runs = []
    with tempfile.TemporaryDirectory(prefix="gpu-rehearsal-") as tmp:
        python = bare_venv(Path(tmp) / "venv")
        wheels = wheels_for(Path(tmp) / "wheels")
        for carried in (wheels, None):
            work = Path(tmp) / ("with-wheels" if carried else "without-wheels")
            work.mkdir()
            runs.append(run_once(python, carried, work, budget))
    return runs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=float, default=400.0, help="the toy session's budget in seconds")
    p.add_argument("--json", type=Path, help="also write the report here")
    args = p.parse_args(argv)
    runs = rehearse(args.budget)
    for run in runs:
        print(f"{'with' if run['wheels'] else 'without'} wheels: rc {run['rc']} in {run['wall_s']} s; {run['network']}")
        print(f"  files: {', '.join(run['files'])}")
        print(f"  steps: {run['steps']}")
        print(f"  missing: {run['missing']}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2) + "\n")
    return 0 if all(run["rc"] == 0 and run["files"] for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
