"""The forkserver's warm-up: trial processes find the study's data loaded, the variable that asked
for it is gone, and a warm-up that fails costs one line, never the study."""

from __future__ import annotations

import os
import subprocess
import sys

from hpo.config.space import parse_space
from hpo.runtime._forkserver_warmup import WARMUP_ENV, warmup_env

SPACE = {
    "study": {"name": "warm"},
    "workload": {"name": "causal_lm", "d_model": 32, "n_layers": 1, "seq_len": 16, "max_steps": 2},
    "params": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}, "batch_size": 4},
    "systems": {"precision": ["fp32", "bf16"], "attention": ["sdpa", "eager"], "optimizer": "fused"},
}
# What a forkserver does with its preload list, then what a trial process would look at.
# The profiler must not start in the forkserver: processes forked after it trained 8-13% slower.
PROBE = """
import os, sys, torch, torch.profiler
started = []
torch.profiler.profile.start = lambda self: started.append(self)
import hpo.runtime._forkserver_warmup
from hpo.workloads import causal_lm
print(causal_lm.load_corpus.cache_info().currsize, os.environ.get(sys.argv[1]), torch.get_num_threads(), len(started),
      "torch._dynamo" in sys.modules)
"""


def _forkserver(spec: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **{WARMUP_ENV: spec}, OMP_NUM_THREADS="2")
    return subprocess.run([sys.executable, "-c", PROBE, WARMUP_ENV], env=env, capture_output=True, text=True, timeout=120)


def test_the_warmup_loads_the_studys_data_and_torchs_lazy_imports_once_leaves_the_threads_as_they_were_and_starts_no_profiler():
    spec = warmup_env(parse_space(SPACE, source="test"))
    assert '"attention": "eager"' in spec  # the reference attention: no optional package, no device
    done = _forkserver(spec)
    assert done.returncode == 0, done.stderr
    # The corpus is cached for every process forked from here, and torch._dynamo imported (the first
    # optimizer's import, else paid in every trial's probe); the request is not passed on to them.
    assert done.stdout.split() == ["1", "None", "2", "0", "True"]
    assert done.stderr == ""


def test_a_failed_warmup_is_one_line_and_nothing_else():
    done = _forkserver('{"workload": "no_such_workload", "options": {}, "training": {}, "attention": "eager"}')
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:1] == ["0"]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpo: warming the trial processes failed")
