"""`hpo run` starts its forkserver before it imports torch: the forkserver's imports and warm-up
(seconds) overlap the study's creation only if this process has not paid for torch first. `hpo run`
catches what `hpo.run_study` raises (`hpo.errors.NoKnobsRunHere`, `hpo.strategy.WorkersFailed`)
through torch-free modules; importing the modules that raise them would import torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The forkserver's start is replaced by a probe of what this process has imported, then an exit.
SCRIPT = """
import json, sys
import hpo.runtime._forkserver as forkserver

def probe(*args, **kwargs):
    print(json.dumps({"torch": "torch" in sys.modules}))
    raise SystemExit(0)

forkserver.start_early = probe
from hpo.app.cli import main
main(["run", "search_spaces/quickstart.yaml", "--storage", sys.argv[1]])
"""


def test_hpo_run_has_not_imported_torch_when_its_forkserver_starts(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, f"sqlite:///{tmp_path / 'never.db'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"torch": False}
