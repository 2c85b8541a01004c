"""What runs on this machine is known before any trial, by running it: an xformers whose ops do not
load (v0.0.35 built for another torch, as on the H200) imports, yet `hpo doctor` says "no" with
xformers' own reason and no worker proposes it; flash-attn's fp32 refusal excludes that pair only;
a package optimizer is stepped once. On the CPU, with the faithful fakes of tests/contracts/fakes."""

from __future__ import annotations

import pytest
import torch

from contracts.fakes import xformers_unloaded
from hpo.app import doctor
from hpo.config.space import parse_space
from hpo.runtime import run_worker
from hpo.study import create_or_resume
from hpo.verify.machine import check_values

CPU = torch.device("cpu")
NO_OPERATOR = "No operator found for `memory_efficient_attention_forward`"


@pytest.fixture
def xformers_without_ops(gpu_fakes, monkeypatch):
    monkeypatch.setattr(gpu_fakes.xformers_ops, "memory_efficient_attention", xformers_unloaded.memory_efficient_attention)
    return gpu_fakes


def test_xformers_that_imports_but_whose_ops_do_not_load_is_no_in_doctor_with_its_reason(xformers_without_ops):
    row = doctor.capability_report(CPU)["attention"]["xformers"]
    assert not row["usable"]
    assert row["why"].startswith(NO_OPERATOR) and "xFormers wasn't build with CUDA support" in row["why"]
    line = next(x for x in doctor.format_report(doctor.capability_report(CPU)).splitlines() if x.startswith("  xformers"))
    assert line.startswith(f"  xformers            no   {NO_OPERATOR}"), line


def test_a_working_xformers_is_yes(gpu_fakes):
    assert doctor.capability_report(CPU)["attention"]["xformers"] == {"usable": True, "why": ""}


@pytest.mark.slow
def test_xformers_whose_ops_do_not_load_is_never_proposed(xformers_without_ops, tmp_path, capsys):
    space = parse_space(
        {
            "study": {"name": "xf", "sampler": {"name": "random", "seed": 0}, "pruner": {"name": "none"}, "n_trials": 6},
            "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2, "n_blocks": 1},
            "systems": {"precision": ["fp32", "bf16"], "attention": ["eager", "xformers"], "optimizer": "forloop"},
        },
        source="test",
    )
    url = f"sqlite:///{tmp_path / 'xf.db'}"
    study = create_or_resume(space, url)
    run_worker(study, url, isolate=False)
    assert [t.params["attention"] for t in study.get_trials()] == ["eager"] * 6
    said = [x for x in capsys.readouterr().err.splitlines() if x.startswith("not proposed on this machine")]
    assert len(said) == 1 and f"attention=xformers: {NO_OPERATOR}" in said[0], said


def test_flash_attn_refused_with_fp32_is_a_pair_and_yes_with_the_rest(gpu_fakes):
    check = check_values({"precision": ["fp32", "bf16", "fp16"], "attention": ["flash_attn"]}, CPU)
    assert [n.part for n in check.not_runnable] == [(("attention", "flash_attn"), ("precision", "fp32"))]
    assert check.not_runnable[0].line() == (
        "attention=flash_attn with precision=fp32: FlashAttention only support fp16 and bf16 data type"
    )
    report = doctor.capability_report(CPU)
    row = report["attention"]["flash_attn"]
    assert row["usable"] and row["not_with"] == {"precision": {"fp32": "FlashAttention only support fp16 and bf16 data type"}}
    expected = "  flash_attn          yes  no with precision=fp32: FlashAttention only support fp16 and bf16 data type"
    assert expected in doctor.format_report(report).splitlines()
    # With fp32 the only precision searched, flash_attn itself cannot run
    only_fp32 = check_values({"precision": ["fp32"], "attention": ["flash_attn"]}, CPU)
    assert [n.part for n in only_fp32.not_runnable] == [(("attention", "flash_attn"),)]


def test_apex_is_stepped_once_and_only_a_known_refusal_excludes_it(gpu_fakes, monkeypatch):
    systems = {"precision": ["fp32"], "optimizer": ["apex"]}
    assert check_values(systems, CPU).not_runnable == ()

    def refuse(self, closure=None):  # apex/optimizers/fused_adam.py's dtype check, as it raises it
        raise RuntimeError("FusedAdam only support fp16, bf16 and fp32.")

    monkeypatch.setattr(gpu_fakes.apex_optimizers.FusedAdam, "step", refuse)
    check = check_values(systems, CPU)
    assert [n.line() for n in check.not_runnable] == ["optimizer=apex: FusedAdam only support fp16, bf16 and fp32."]

    def unknown(self, closure=None):  # not a refusal hpo knows: the trials' probe judges it
        raise RuntimeError("CUDA driver version is insufficient for CUDA runtime version")

    monkeypatch.setattr(gpu_fakes.apex_optimizers.FusedAdam, "step", unknown)
    check = check_values(systems, CPU)
    assert check.not_runnable == () and "optimizer=apex: its check raised RuntimeError: CUDA driver" in check.unchecked[0]
