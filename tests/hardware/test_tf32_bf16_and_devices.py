"""GPU runtime paths on CPU: TF32 through `fp32_precision` (never mixed with `allow_tf32`), bf16
counted only when native, and `cuda:N` under a worker pinned with CUDA_VISIBLE_DEVICES.

Contracts read from PyTorch (aten/src/ATen/Context.cpp, torch/backends/cuda and cudnn, torch 2.9 to
2.13; run here against torch 2.13 CPU): reading a legacy getter (`allow_tf32`,
`torch.get_float32_matmul_precision()`) while the legacy and new views disagree raises "... mix of
the legacy and new APIs ..."; `torch.cuda.is_bf16_supported(including_emulation=True)` is the default.
"""

from __future__ import annotations

import types

import pytest
import torch

from hpo.errors import UserInputError
from hpo.hardware import _runtime as runtime
from hpo.hardware import _tf32 as tf32
from hpo.hardware import probes, resolve_device, trial_runtime

FAKE_GPU = torch.device("cuda", 0)
SITES = ("cuda.matmul", "cudnn.conv", "cudnn.rnn", "mkldnn.matmul")


@pytest.fixture(autouse=True)
def _restore_fp32_precision():
    """This file sets TF32 state the way other libraries do; put back the process's state."""
    backends = torch.backends
    raw = {"generic": backends.fp32_precision, "cudnn": backends.cudnn.fp32_precision, **tf32.state()}
    enum = tf32._matmul_enum() or "highest"
    yield
    torch.set_float32_matmul_precision(enum)
    backends.fp32_precision = raw.pop("generic")
    backends.cudnn.fp32_precision = raw.pop("cudnn")
    tf32._write(raw)


@pytest.fixture
def ampere(monkeypatch):
    monkeypatch.setattr(probes, "compute_capability", lambda device: (8, 0))


def _legacy_views() -> tuple:
    """The legacy getters torch, Lightning and inductor read; "raises" where torch refuses."""
    out = []
    for read in (torch.get_float32_matmul_precision, lambda: torch.backends.cuda.matmul.allow_tf32):
        try:
            out.append(read())
        except RuntimeError as exc:
            assert "mix of the legacy and new APIs" in str(exc)
            out.append("raises")
    return tuple(out)


def test_this_torch_has_fp32_precision_and_hpo_uses_it():
    assert tf32.has_fp32_precision()


@pytest.mark.parametrize(
    "set_first",
    [
        pytest.param(lambda: setattr(torch.backends, "fp32_precision", "tf32"), id="generic-tf32-as-transformers"),
        pytest.param(lambda: setattr(torch.backends.cuda.matmul, "fp32_precision", "ieee"), id="matmul-ieee"),
        pytest.param(lambda: setattr(torch.backends.cudnn.conv, "fp32_precision", "ieee"), id="conv-ieee"),
        pytest.param(lambda: None, id="untouched"),
    ],
)
def test_new_api_set_first_then_a_cuda_trial_runs_tf32_and_restores_it(ampere, set_first):
    set_first()
    before = tf32.state()
    with trial_runtime(FAKE_GPU) as settings:
        assert settings["tf32"] is True
        inside = tf32.state()
        assert (inside["cuda.matmul"], inside["cudnn.conv"], inside["cudnn.rnn"]) == ("tf32", "tf32", "tf32")
        assert inside["mkldnn.matmul"] == before["mkldnn.matmul"]  # CPU matmuls untouched
        # Lightning (every Ampere+ Trainer) and inductor's autotuner read the legacy view here.
        assert _legacy_views() == ("high", True)
    assert tf32.state() == before


def test_lightning_checks_matmul_precision_inside_a_cuda_trial_without_error(ampere, monkeypatch):
    """lightning.fabric.accelerators.cuda._check_cuda_matmul_precision (Lightning 2.6) calls
    torch.get_float32_matmul_precision() on an Ampere+ GPU; with fp32_precision alone it raises."""
    from lightning.fabric.accelerators import cuda as lightning_cuda

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    check = lightning_cuda._check_cuda_matmul_precision.__wrapped__  # past its lru_cache
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # what any library may have done first
    with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
        check(FAKE_GPU)
    with trial_runtime(FAKE_GPU):
        check(FAKE_GPU)


def test_hpo_never_writes_allow_tf32_where_fp32_precision_exists(ampere, monkeypatch):
    def refuse(*args):
        raise AssertionError("legacy allow_tf32 written")

    monkeypatch.setattr(torch._C, "_set_cublas_allow_tf32", refuse)  # cuBLASModule.__setattr__ looks it up per write
    monkeypatch.setattr(torch._C, "_set_cudnn_allow_tf32", refuse)  # cudnn.flags() and set_flags() look it up per call
    # `torch.backends.cudnn.allow_tf32 = ...` goes through a ContextProp that bound the setter at
    # import: patching torch._C alone leaves that write unguarded.
    monkeypatch.setattr(type(torch.backends.cudnn).__dict__["allow_tf32"], "setter", refuse)
    with trial_runtime(FAKE_GPU):
        pass
    with pytest.raises(AssertionError, match="legacy allow_tf32 written"):  # the guard holds for both writes
        torch.backends.cudnn.allow_tf32 = True
    with pytest.raises(AssertionError, match="legacy allow_tf32 written"):
        torch.backends.cuda.matmul.allow_tf32 = True


def test_torch_without_fp32_precision_uses_allow_tf32(ampere, monkeypatch):
    matmul = types.SimpleNamespace(allow_tf32=False)
    cudnn = types.SimpleNamespace(allow_tf32=False, benchmark=False)
    monkeypatch.setattr(torch.backends.cuda, "matmul", matmul)
    monkeypatch.setattr(torch.backends, "cudnn", cudnn)
    assert not tf32.has_fp32_precision()
    with trial_runtime(FAKE_GPU) as settings:
        assert settings["tf32"] and matmul.allow_tf32 and cudnn.allow_tf32
    assert (matmul.allow_tf32, cudnn.allow_tf32) == (False, False)


def test_a_cpu_trial_leaves_tf32_alone_and_a_pre_ampere_gpu_records_no_tf32(monkeypatch):
    before = tf32.state()
    with trial_runtime(torch.device("cpu")) as settings:
        assert tf32.state() == before and settings["tf32"] is False
    monkeypatch.setattr(probes, "compute_capability", lambda device: (7, 0))
    with trial_runtime(FAKE_GPU) as settings:
        assert settings["tf32"] is False  # flags on, but no TF32 tensor cores ran
    assert tf32.state() == before


# ---- bf16 ------------------------------------------------------------------------------------


def _is_bf16_supported_of(native: bool):
    """torch.cuda.is_bf16_supported as a GPU answers it: emulation counts unless told otherwise."""

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return native or including_emulation

    return is_bf16_supported


@pytest.mark.parametrize("gpu,cc,native", [("V100", (7, 0), False), ("T4", (7, 5), False), ("A100", (8, 0), True)])
def test_bf16_is_usable_only_without_emulation(monkeypatch, gpu, cc, native):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", _is_bf16_supported_of(native))
    monkeypatch.setattr(probes, "compute_capability", lambda device: cc)
    cap = probes.bf16_supported(FAKE_GPU)
    assert cap.usable is native
    if not native:
        assert f"{cc} < 8.0" in cap.why and "emulated" in cap.why


def test_bf16_on_a_torch_without_the_emulation_argument(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    monkeypatch.setattr(probes, "compute_capability", lambda device: (7, 5))
    assert not probes.bf16_supported(FAKE_GPU).usable


# ---- cuda:N under per-worker CUDA_VISIBLE_DEVICES ---------------------------------------------


@pytest.fixture
def one_visible_gpu(monkeypatch):
    """A worker hpo pinned to physical GPU 2: torch sees one device, cuda:0."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")


def test_an_ordinal_the_pinned_worker_cannot_see_is_refused_in_one_line(one_visible_gpu):
    with pytest.raises(UserInputError) as caught:
        resolve_device("cuda:2")
    message = str(caught.value)
    assert "\n" not in message and "'cuda:2'" in message and "sees 1 CUDA device" in message
    assert "CUDA_VISIBLE_DEVICES='2'" in message and "'auto'" in message


@pytest.mark.parametrize("name,expected", [("auto", "cuda"), ("cuda", "cuda"), ("cuda:0", "cuda:0")])
def test_the_pinned_workers_own_gpu_resolves(one_visible_gpu, name, expected):
    assert resolve_device(name) == torch.device(expected)


def test_cuda_on_a_cpu_only_host_is_refused(monkeypatch):
    monkeypatch.setattr(runtime.torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserInputError, match="no CUDA device"):
        resolve_device("cuda:0")
    assert resolve_device("auto") == torch.device("cpu")
