"""A worker's trial processes share the probe's reference step through the worker's folder: the
first probe of the model writes it, the probes of later knob combinations read it, and the folder
is gone when the worker ends. An in-process worker keeps it in memory and writes nothing. A space
that fixes every knob gets no folder."""

from __future__ import annotations

import tempfile

import pytest
import yaml

from hpo.config.space import parse_space
from hpo.runtime import run_worker
from hpo.runtime._reference_folders import reference_folder
from hpo.study import create_or_resume
from hpo.verify.probing import ReferenceFiles
from worker_harness import hpo, hpo_env, space_file, trials


@pytest.mark.slow
def test_later_probes_in_trial_processes_read_the_first_probes_reference(tmp_path):
    path = space_file(tmp_path, 4, workload="toy_workloads:HparamFreeToy")
    space = yaml.safe_load(path.read_text())
    space["systems"]["optimizer"] = ["forloop", "foreach", "fused"]
    path.write_text(yaml.safe_dump(space))
    temp = tmp_path / "tmp"
    temp.mkdir()
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    run = hpo("run", path, "--storage", storage, env=hpo_env(TMPDIR=str(temp)))
    assert run.returncode == 0, run.stderr
    probed = [t for t in sorted(trials(storage), key=lambda t: t.number) if not t.user_attrs["probe_cached"]]
    assert len(probed) >= 2  # the seeded sampler draws at least two of the three optimizers
    assert [t.user_attrs["probe_reference_reused"] for t in probed] == [False] + [True] * (len(probed) - 1)
    assert all(t.user_attrs["verdict"] == "ok" for t in probed)
    assert list(temp.glob("hpo-reference-*")) == []  # the worker removed its folder


@pytest.mark.slow
def test_an_in_process_worker_keeps_the_reference_in_memory_and_writes_no_file(tmp_path, monkeypatch):
    space = yaml.safe_load(space_file(tmp_path, 3, workload="toy_workloads:HparamFreeToy").read_text())
    space["systems"]["optimizer"] = optimizers = ["forloop", "foreach", "fused"]
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = create_or_resume(parse_space(space, source="test"), storage)
    for optimizer in optimizers:
        study.enqueue_trial({"optimizer": optimizer})
    written = []
    monkeypatch.setattr(ReferenceFiles, "put", lambda self, key, reference: written.append(key) or True)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    run_worker(study, storage, isolate=False)
    done = sorted(trials(storage), key=lambda t: t.number)
    assert [t.params["optimizer"] for t in done] == optimizers
    assert [t.user_attrs["verdict"] for t in done] == ["ok"] * 3
    assert [t.user_attrs["probe_reference_reused"] for t in done] == [False, True, True]
    assert written == [] and list(temp.iterdir()) == []  # no file, no folder


def test_a_space_with_every_knob_fixed_keeps_no_folder(tmp_path):
    fixed = yaml.safe_load(space_file(tmp_path, 1).read_text())
    assert reference_folder(parse_space(fixed, source="test")) is None
    fixed["systems"]["precision"] = ["fp32", "bf16"]
    folder = reference_folder(parse_space(fixed, source="test"))
    assert folder is not None
    folder.cleanup()
