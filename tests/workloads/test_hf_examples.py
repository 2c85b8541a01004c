"""The shipped search spaces of the Hugging Face workloads are valid on the inputs that
`python -m hpo.workloads.hf_examples DIR` writes from installed packages."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hpo.config.space import parse_space
from hpo.workloads.catalog import create_workload
from hpo.workloads.hf_examples import write_examples

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_shipped_spaces_validate_and_build_on_the_written_examples(tmp_path):
    write_examples(tmp_path / "hf-example")
    for name in ("hf_text_classification", "hf_causal_lm"):
        raw = yaml.safe_load((ROOT / "search_spaces" / f"{name}.yaml").read_text())
        workload = raw["workload"]
        for key in ("model_name_or_path", "train_file", "validation_file"):
            assert workload[key].startswith("studies/hf-example/")
            workload[key] = str(tmp_path / workload[key].removeprefix("studies/"))
        space = parse_space(raw, source=f"{name}.yaml")
        built = create_workload(name, {**space.workload_options(), "cache_dir": str(tmp_path / "cache")})
        assert set(space.study.objectives) - {"train_samples_per_s"} <= set(built.metrics)
        if name == "hf_text_classification":  # the chatterbot topics, as string labels
            assert "trivia" in built.data["labels"] and len(built.data["labels"]) >= 10
        else:
            assert len(built.train_data) > 10 * built.options.block_size
