from __future__ import annotations

import functools
import math
import os
import socket

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from hpo import deps
from hpo.errors import KnobUnavailable, UserInputError
from hpo.knobs.attention_kernels import eager_attention, pinned_kernel
from hpo.knobs.recompute import RecomputeCounter, enable_checkpointing
from hpo.knobs.registry import ATTENTION_SPECS
from hpo.workloads import chat_corpus as corpus
from hpo.workloads import text_classification as tc
from hpo.workloads.base import build_options

TextClassification = tc.TextClassification


def tiny(**options) -> TextClassification:
    return TextClassification(TextClassification.Options(model="tiny", **options))


def profiled_ops(workload: TextClassification, attention: str) -> set[str]:
    model = workload.build_model(attention)
    batch = next(workload.train_batches(4, seed=0))
    with pinned_kernel(attention), profile(activities=[ProfilerActivity.CPU]) as prof:
        workload.training_loss(model, batch).backward()
    return {event.key for event in prof.key_averages()}


def test_dataset_is_real_text_with_a_deterministic_stratified_split():
    topics, pairs = corpus.load_corpus()
    assert len(topics) >= 2 and "trivia" in topics
    assert all(isinstance(text, str) and text for text, _ in pairs)
    assert len({text for text, _ in pairs}) == len(pairs)  # each text under exactly one topic
    assert ("what is ai?", topics.index("ai")) in pairs

    data = corpus.load_data(32, None, None)
    fresh = corpus.load_data.__wrapped__(32, None, None)  # bypass the cache: the split itself is deterministic
    for split, again in ((data.train, fresh.train), (data.eval, fresh.eval)):
        for key in ("input_ids", "attention_mask", "labels"):
            assert torch.equal(split[key], again[key])
    assert set(data.eval["labels"].tolist()) == set(range(len(topics)))  # every topic is validated
    assert len(data.train_texts) + len(data.eval_texts) == len(pairs)
    assert not set(data.train_texts) & set(data.eval_texts)


def test_caps_and_batches_are_seeded():
    workload = tiny(n_train=40, n_eval=24)
    assert len(workload.data.train["labels"]) == 40 and len(workload.data.eval["labels"]) == 24
    first = [b["labels"] for _, b in zip(range(6), workload.train_batches(16, seed=3))]
    again = [b["labels"] for _, b in zip(range(6), workload.train_batches(16, seed=3))]
    other = [b["labels"] for _, b in zip(range(6), workload.train_batches(16, seed=4))]
    assert all(len(b) == 16 for b in first)  # full batches across epoch boundaries (40 is not a multiple)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))
    batch = next(workload.train_batches(8, seed=0))
    assert set(batch) == {"input_ids", "attention_mask", "labels"} and batch["input_ids"].shape == (
        8,
        workload.options.max_length,
    )


@pytest.mark.parametrize(
    "raw, match",
    [
        ({"max_length": 4}, "max_length"),
        ({"dropout": 1.0}, "dropout"),
        ({"attention_dropout": -0.1}, "attention_dropout"),
        ({"n_train": 0}, "n_train"),
        ({"model": "bert-large"}, "model"),
    ],
)
def test_bad_options_name_the_rule_and_value(raw, match):
    with pytest.raises(UserInputError, match=match):
        build_options(TextClassification.Options, raw, "workload")


def test_every_attention_backend_has_a_transformers_implementation_from_its_spec():
    implementations = {
        name: tc.hf_attention_implementation(name) for name in ATTENTION_SPECS if name not in ("flash_attn", "xformers")
    }
    assert implementations == {name: ATTENTION_SPECS[name].transformers for name in implementations}
    assert set(implementations.values()) == {"eager", "sdpa"}
    assert all(spec.transformers for spec in ATTENTION_SPECS.values())


def test_attention_knob_changes_the_kernel_that_runs():
    workload = tiny(n_train=16, n_eval=16)
    eager = profiled_ops(workload, "eager")
    assert not any("scaled_dot_product" in op for op in eager)
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in profiled_ops(workload, "sdpa")
    math_ops = profiled_ops(workload, "sdpa_math")
    assert "aten::_scaled_dot_product_attention_math" in math_ops
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" not in math_ops
    with pytest.raises(RuntimeError, match="No viable backend"):
        profiled_ops(workload, "sdpa_efficient")


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch explains why it skipped the fused kernels
def test_attention_dropout_leaves_sdpa_only_the_math_kernel_on_cpu():
    workload = tiny(n_train=16, n_eval=16, attention_dropout=0.1)
    assert "aten::_scaled_dot_product_attention_math" in profiled_ops(workload, "sdpa")
    with pytest.raises(RuntimeError, match="No available kernel"):
        profiled_ops(workload, "sdpa_flash")


@pytest.mark.parametrize("attention, module", [("flash_attn", "flash_attn"), ("xformers", "xformers")])
def test_missing_attention_packages_are_unavailable(attention, module):
    if deps.is_installed(module):
        pytest.skip(f"{module} is installed")
    with pytest.raises(KnobUnavailable, match="incompatible"):
        tiny(n_train=16, n_eval=16).build_model(attention)


def test_registered_attention_keeps_the_layout_and_the_padding_mask(monkeypatch):
    # Stand the reference kernel in for xformers, so the registered path itself is checked on CPU.
    monkeypatch.setattr(tc, "attention_function", lambda name: eager_attention)
    workload = tiny(n_train=16, n_eval=16, dropout=0.0)
    batch = next(workload.train_batches(8, seed=0))
    assert (batch["attention_mask"] == 0).any()
    outputs = []
    for attention in ("eager", "xformers"):
        model = workload.build_model(attention).eval()
        with torch.no_grad():
            outputs.append(model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits)
    assert model.config._attn_implementation == "hpo_xformers"
    torch.testing.assert_close(outputs[0], outputs[1])


def test_training_reduces_the_loss_and_evaluate_reports_both_metrics():
    workload = tiny(n_train=32, n_eval=48, dropout=0.0)
    model = workload.build_model("sdpa")
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    batch = next(workload.train_batches(16, seed=0))
    losses = []
    for _ in range(6):
        loss = workload.training_loss(model, batch)
        assert loss.dtype == torch.float32
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]
    model.eval()
    with torch.no_grad():
        metrics = workload.evaluate(model, lambda b: b)
    assert set(metrics) == set(TextClassification.metrics)
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())
    assert 0.0 <= metrics["val_accuracy"] <= 1.0


def test_bf16_autocast_keeps_a_float32_loss():
    workload = tiny(n_train=16, n_eval=16)
    model = workload.build_model("eager")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = workload.training_loss(model, next(workload.train_batches(4, seed=0)))
    assert loss.dtype == torch.float32 and math.isfinite(loss.item())


def test_checkpoint_blocks_are_the_encoder_layers_and_freezing_stops_embedding_grads():
    workload = tiny(n_train=16, n_eval=16, freeze_embeddings=True)
    model = workload.build_model("eager")
    blocks = workload.checkpoint_blocks(model)
    assert len(blocks) == 2 and all(a is b for a, b in zip(blocks, model.bert.encoder.layer))
    assert not any(p.requires_grad for p in model.bert.embeddings.parameters())
    assert all(p.requires_grad for p in blocks[0].parameters())
    counter = RecomputeCounter()
    enable_checkpointing(blocks, counter)  # what the executor does: each layer recomputed in backward
    workload.training_loss(model, next(workload.train_batches(4, seed=0))).backward()
    assert (counter.forward_runs, counter.backward_runs) == (2, 2)


def test_same_seed_builds_the_same_model_without_touching_the_global_rng():
    workload = tiny(n_train=16, n_eval=16)
    state = torch.random.get_rng_state()
    a, b = workload.build_model("eager"), workload.build_model("sdpa")
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_minilm_loads_pretrained_weights_offline(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("the workload tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(corpus, "tokenizer", functools.cache(corpus.tokenizer.__wrapped__))  # load it again, offline
    from safetensors import safe_open

    workload = TextClassification(TextClassification.Options(n_train=16, n_eval=16))
    model = workload.build_model("sdpa")
    assert model.config._attn_implementation == "sdpa" and len(workload.checkpoint_blocks(model)) == 6
    with safe_open(f"{corpus.model_path()}/model.safetensors", "pt") as checkpoint:
        keys = checkpoint.keys()  # a safetensors handle, not a dict
        name = next(k for k in keys if k.endswith("embeddings.word_embeddings.weight"))
        torch.testing.assert_close(model.bert.embeddings.word_embeddings.weight, checkpoint.get_tensor(name))
    loss = workload.training_loss(model, next(workload.train_batches(16, seed=0)))
    loss.backward()
    assert math.isfinite(loss.item())
    # The weights live in the process's own memory, not in the checkpoint's memory map, whose pages
    # the first optimizer step would copy-on-write fault one by one (0.2 s a trial).
    mapped = _mapped_ranges(f"{corpus.model_path()}/model.safetensors")
    tensors = [*model.parameters(), *model.buffers()]
    assert not [t for t in tensors if any(lo <= t.data_ptr() < hi for lo, hi in mapped)]


def _mapped_ranges(path: str) -> list[tuple[int, int]]:
    """The address ranges at which this process maps `path` (Linux)."""
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and os.path.realpath(fields[5]) == os.path.realpath(path):
                lo, hi = fields[0].split("-")
                ranges.append((int(lo, 16), int(hi, 16)))
    return ranges


def test_the_corpus_reads_the_same_with_libyaml_as_with_pure_python_yaml():
    from importlib import resources

    import yaml

    root = resources.files("chatterbot_corpus") / "data" / "english"
    for path in sorted(root.iterdir(), key=lambda p: p.name):
        text = path.read_text(encoding="utf-8")
        assert yaml.load(text, Loader=yaml.CSafeLoader) == yaml.safe_load(text), path.name


def test_evaluation_cuts_unused_padding_without_changing_the_metrics():
    workload = tiny(n_train=16, n_eval=96)
    lengths = workload.data.eval["attention_mask"].sum(1)
    assert torch.equal(lengths, lengths.sort().values)  # shortest first, texts in the same order
    for i in (0, len(lengths) - 1):  # each text still beside its own tokens
        encoded = corpus.tokenizer()(workload.data.eval_texts[i], truncation=True, max_length=workload.options.max_length)
        assert encoded["input_ids"] == workload.data.eval["input_ids"][i, : lengths[i]].tolist()
    model = workload.build_model("sdpa").eval()
    seen: list[int] = []
    model.register_forward_pre_hook(lambda module, args, kwargs: seen.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    with torch.inference_mode():
        metrics = workload.evaluate(model, lambda b: b)
        widths = seen[:]  # the full-width reference below runs through the hook too
        padded = _metrics_at_full_width(workload, model)
    max_length = workload.options.max_length
    assert len(widths) == 3 and widths == sorted(widths) and widths[0] < max_length  # what the model ran on
    assert all(w % corpus.EVAL_WIDTH_MULTIPLE == 0 or w == max_length for w in widths)
    assert metrics["val_accuracy"] == pytest.approx(padded["val_accuracy"])
    assert metrics["val_loss"] == pytest.approx(padded["val_loss"], rel=1e-5)


def _metrics_at_full_width(workload: TextClassification, model) -> dict[str, float]:
    data = workload.data.eval
    logits = model(input_ids=data["input_ids"], attention_mask=data["attention_mask"]).logits
    loss = torch.nn.functional.cross_entropy(logits, data["labels"]).item()
    return {"val_accuracy": (logits.argmax(-1) == data["labels"]).float().mean().item(), "val_loss": loss}


@pytest.mark.slow
def test_a_compiled_model_evaluates_every_cut_width_with_one_set_of_graphs():
    from hpo.config.trial import Knobs, TrainingConfig
    from hpo.engine import AssembledModel

    knobs = Knobs(compile="default", precision="fp32", attention="sdpa", optimizer="fused")
    training = TrainingConfig(lr=1e-3, batch_size=16, max_steps=1, eval_every=1, compile_backend="eager")
    graphs = {}
    for n_eval in (corpus.EVAL_BATCH_SIZE, 3 * corpus.EVAL_BATCH_SIZE):  # one width, then three
        torch._dynamo.reset()
        assembled = AssembledModel(tiny(n_train=16, n_eval=n_eval), knobs, training, torch.device("cpu"))
        widths = {
            batch["input_ids"].shape[1]
            for batch in corpus.evaluation_batches(assembled.workload.data.eval, corpus.EVAL_BATCH_SIZE)
        }
        assembled.evaluate()  # under the executor's rule that a recompile past the limit fails
        graphs[len(widths)] = assembled.graphs.graphs
    assert set(graphs) == {1, 3} and graphs[3] == graphs[1] >= 1
