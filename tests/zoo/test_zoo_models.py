"""The zoo's models are what they say (grouped-query attention, rotary embeddings, the attention
knob mapped onto transformers' switch), cover the families issue 36 names, and load the way a
user's workload loads: by `examples.zoo.<module>:<Class>` from a search-space file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from examples.zoo.hf import HFWorkload
from examples.zoo.models import ZOO
from hpo.errors import KnobUnavailable
from hpo.workloads.catalog import create_workload, metrics_of


def test_at_least_twelve_library_models_cover_every_family():
    library = [m for m in ZOO.values() if m.workload.startswith("examples.zoo.")]
    assert len(library) >= 12
    families = " / ".join(m.family for m in library)
    for family in (
        "encoder",
        "decoder, GQA, rotary",
        "encoder-decoder",
        "vision transformer",
        "BatchNorm",
        "LayerNorm",
        "audio",
        "Lightning",
    ):
        assert family in families, family


@pytest.mark.parametrize("name", ["llama", "mistral", "qwen2"])
def test_rotary_decoders_share_key_value_heads(name):
    model = create_workload(ZOO[name].workload, {}).build_model("sdpa")
    config, attention = model.config, model.model.layers[0].self_attn
    assert config.num_key_value_heads < config.num_attention_heads
    assert attention.k_proj.out_features < attention.q_proj.out_features  # fewer key heads than query heads
    assert type(model.model.rotary_emb).__name__.endswith("RotaryEmbedding")


@pytest.mark.parametrize(("attention", "implementation"), [("eager", "eager"), ("sdpa", "sdpa"), ("sdpa_math", "sdpa")])
def test_attention_names_map_onto_transformers_implementation(attention, implementation):
    model = create_workload("examples.zoo.text:BERT", {}).build_model(attention)
    assert model.config._attn_implementation == implementation


class _Refusing(HFWorkload):
    message = "Foo does not support an attention implementation through sdpa yet"

    def model(self, impl):
        raise ValueError(self.message)


def test_an_implementation_transformers_refuses_is_an_incompatible_verdict():
    with pytest.raises(KnobUnavailable) as caught:
        _Refusing(_Refusing.Options()).build_model("sdpa_flash")
    assert caught.value.verdict.implicates == (("attention", "sdpa_flash"),)
    assert "transformers refused 'sdpa'" in str(caught.value)


def test_another_value_error_is_raised_as_it_is():
    class Broken(_Refusing):
        message = "hidden size must be even"

    with pytest.raises(ValueError, match="hidden size must be even"):
        Broken(Broken.Options()).build_model("sdpa")


def test_same_seed_same_weights_whatever_ran_before():
    workload = create_workload("examples.zoo.vision:ViT", {"seed": 3})
    first = workload.build_model("eager").state_dict()
    torch.randn(100)  # the global generator moved on
    second = workload.build_model("sdpa").state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    other = create_workload("examples.zoo.vision:ViT", {"seed": 4}).build_model("eager").state_dict()
    assert not torch.equal(first["classifier.weight"], other["classifier.weight"])


@pytest.mark.parametrize("name", list(ZOO))
def test_every_model_loads_as_a_user_workload_with_its_metrics(name):
    model = ZOO[name]
    assert metrics_of(model.workload)["val_loss"] == "minimize"
    workload = create_workload(model.workload, model.options)
    batch = next(workload.train_batches(2, seed=0))
    assert all(isinstance(t, torch.Tensor) for t in batch.values()) and workload.samples_in(batch) == 2


def test_the_example_search_space_names_a_zoo_model_that_loads():
    from hpo.config.space import load_space

    space = load_space(Path(__file__).resolve().parents[2] / "examples" / "zoo" / "llama.yaml")
    name = space.spec.workload.name
    assert name == "examples.zoo.text:Llama" and space.systems["grad_checkpointing"] == [False, True]
    assert create_workload(name, space.workload_options()).options.hidden == 32


def test_on_a_gpu_attention_rows_run_at_bf16_and_the_page_says_so():
    # The H200 zoo (2026-11-28) probed sdpa_flash and sdpa_cudnn at fp32 only, where CUDA has no such
    # kernel: 30 refusals that said nothing of the kernels in the precision they exist for.
    from examples.zoo.matrix import row_knobs
    from examples.zoo.render import _value

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert row_knobs("attention", "sdpa_flash", cuda).precision == "bf16"
    assert row_knobs("attention", "sdpa_flash", cpu).precision == "fp32"  # the CPU kernels take fp32
    assert row_knobs("optimizer", "fused", cuda).precision == "fp32"  # only attention moves
    assert row_knobs("precision", "fp16", cuda).precision == "fp16"
    assert _value({"knob": "attention", "value": "sdpa_flash", "precision": "bf16"}) == "attention=sdpa_flash (bf16)"
    assert _value({"knob": "attention", "value": "sdpa", "precision": "fp32"}) == "attention=sdpa"
    assert _value({"knob": "precision", "value": "bf16", "precision": "bf16"}) == "precision=bf16"
