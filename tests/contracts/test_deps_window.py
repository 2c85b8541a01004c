"""The optional GPU packages hpo accepts: flash-attn within the window xformers 0.0.35 accepts,
xformers only with memory_efficient_attention, apex with its CUDA extensions; each refusal names
what is installed and how to install what works."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from contracts.upstream import FLASH_ATTN_WINDOW, XFORMERS_VERSION
from hpo import deps
from hpo.errors import KnobUnavailable


@pytest.fixture(autouse=True)
def _fresh_imports():
    deps._import.cache_clear()
    yield
    deps._import.cache_clear()


def _install(monkeypatch, name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    monkeypatch.setitem(sys.modules, name, module)
    return module


@pytest.mark.parametrize("version", ["2.7.1", "2.7.4.post1", "2.8.0", "2.8.3+cu12torch2.7cxx11abiTRUE", "2.8.4", "2.8.0rc1"])
def test_flash_attn_inside_the_window_is_accepted(monkeypatch, version):
    module = _install(monkeypatch, "flash_attn", __version__=version)
    assert deps.flash_attn() is module


@pytest.mark.parametrize("version", ["2.5.8", "2.6.3", "2.7.0", "2.8.5", "3.0.0b1"])
def test_flash_attn_outside_the_window_names_the_version_and_the_window(monkeypatch, version):
    _install(monkeypatch, "flash_attn", __version__=version)
    with pytest.raises(KnobUnavailable) as raised:
        deps.flash_attn()
    assert version in str(raised.value) and ">=2.7.1,<=2.8.4" in str(raised.value)
    assert raised.value.verdict.implicates == (("attention", "flash_attn"),)


def test_the_window_is_the_one_xformers_accepts():
    low, high = deps.FLASH_ATTN_WINDOW
    assert (deps._dotted(low), deps._dotted(high)) == FLASH_ATTN_WINDOW


def test_missing_flash_attn_says_to_build_without_isolation(monkeypatch):
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # import raises ImportError
    with pytest.raises(KnobUnavailable, match="pip install flash-attn --no-build-isolation"):
        deps.flash_attn()


def test_xformers_without_memory_efficient_attention_is_refused(monkeypatch):
    """xformers HEAD re-exports fmha from another package and swallows that import's error."""
    package = _install(monkeypatch, "xformers", __version__="0.0.36.dev1")
    package.ops = _install(monkeypatch, "xformers.ops")
    with pytest.raises(KnobUnavailable, match=r"0\.0\.36\.dev1 has no xformers\.ops\.memory_efficient_attention"):
        deps.xformers_ops()


def test_xformers_with_memory_efficient_attention_is_accepted(monkeypatch):
    package = _install(monkeypatch, "xformers", __version__=XFORMERS_VERSION)
    package.ops = _install(monkeypatch, "xformers.ops", memory_efficient_attention=lambda *a, **k: None)
    assert deps.xformers_ops() is package.ops


def test_apex_install_line_is_the_readmes():
    assert "APEX_CPP_EXT=1 APEX_CUDA_EXT=1 pip install -v --no-build-isolation ." in deps.APEX_INSTALL


def test_gpu_extra_pins_the_verified_versions():
    lines = (Path(__file__).parents[2] / "pyproject.toml").read_text().splitlines()
    gpu = next(line for line in lines if line.startswith("gpu = "))
    low, high = FLASH_ATTN_WINDOW
    assert f'"flash-attn>={low},<={high}"' in gpu and f'"xformers=={XFORMERS_VERSION}"' in gpu
