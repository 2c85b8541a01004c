import itertools
import math

import pytest
import torch
from torch import nn

from hpo.errors import UserInputError
from hpo.knobs.recompute import RecomputeCounter, count_block_runs, enable_checkpointing
from hpo.workloads.base import build_options
from hpo.workloads.catalog import create_workload
from hpo.workloads.timeseries_classification import SelfAttention, TimeseriesClassification, load_msft

Options = TimeseriesClassification.Options
SMALL = dict(window=32, conv_channels=16, lstm_hidden=16, attention_heads=2)


def small(**overrides) -> TimeseriesClassification:
    return TimeseriesClassification(Options(**{**SMALL, **overrides}))


def op_names(workload, model, batch) -> set[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        workload.training_loss(model, batch).backward()
    return {event.key for event in prof.key_averages()}


def test_data_is_the_real_msft_series():
    dates, values = load_msft()
    assert len(dates) == len(values) == 7983
    assert (dates[0], dates[-1]) == ("1986-03-13", "2017-11-10")
    assert list(dates) == sorted(dates)
    assert values[-1, 3] == pytest.approx(83.87)  # close on 2017-11-10
    assert (values[:, :4] > 0).all()
    assert (values[:, 1] >= values[:, 2]).all()  # high >= low


def test_split_is_chronological_with_all_classes():
    workload = TimeseriesClassification(Options())
    data, window, horizon = workload.data, workload.options.window, workload.options.horizon
    assert len(data.train_ends) > 1000 and len(data.val_ends) > 1000
    last_train_day = int(data.train_ends.max()) + horizon  # the day its label is read from
    first_val_day = int(data.val_ends.min()) - window + 1
    assert last_train_day < data.split_day <= first_val_day
    assert data.dates[last_train_day] < data.dates[first_val_day]
    train_counts = torch.bincount(data.labels[data.train_ends], minlength=3)
    val_counts = torch.bincount(data.labels[data.val_ends], minlength=3)
    assert (val_counts > 0).all() and len(train_counts) == len(val_counts) == 3
    assert (train_counts - len(data.train_ends) / 3).abs().max() <= 2  # terciles: balanced training classes


def test_features_standardised_with_training_days_only():
    data = TimeseriesClassification(Options()).data
    train = data.features[: data.split_day]
    assert train.mean(dim=0).abs().max() < 0.05
    assert ((train.std(dim=0) - 1).abs() < 0.25).all()  # < 1 only because of the +-5 clip
    assert torch.isfinite(data.features).all()
    assert (data.labels[data.train_ends] >= 0).all() and (data.labels[data.val_ends] >= 0).all()


def test_train_batches_deterministic_per_seed_and_reshuffled_each_epoch():
    workload = small()
    batch_size = len(workload.data.train_ends) // 2  # two batches an epoch
    first = list(itertools.islice(workload.train_batches(batch_size, seed=3), 3))
    again = list(itertools.islice(workload.train_batches(batch_size, seed=3), 3))
    other = next(workload.train_batches(batch_size, seed=4))
    assert first[0]["x"].shape == (batch_size, 32, 4) and first[0]["x"].dtype == torch.float32
    assert first[0]["labels"].shape == (batch_size,) and first[0]["labels"].dtype == torch.int64
    for a, b in zip(first, again):
        assert torch.equal(a["x"], b["x"]) and torch.equal(a["labels"], b["labels"])
    assert not torch.equal(first[0]["x"], other["x"])
    assert not torch.equal(first[0]["x"], first[2]["x"])  # epoch 2 starts with a different order


@pytest.mark.parametrize("extra", [1, None])
def test_train_batches_rejects_batch_sizes_outside_the_training_set(extra):
    workload = small()
    batch_size = 0 if extra is None else len(workload.data.train_ends) + extra
    with pytest.raises(UserInputError, match=f"batch_size: .* but got {batch_size}"):
        next(workload.train_batches(batch_size, seed=0))


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"window": 1}, "window: must be an integer >= 2, but got 1"),
        ({"horizon": 0}, "horizon"),
        ({"attention_heads": -1}, "attention_heads"),
        ({"lstm_hidden": 30, "attention_heads": 4}, "must divide lstm_hidden.*30.*4"),
        ({"dropout": 1.0}, "dropout.*1.0"),
        ({"val_fraction": 0.0}, "val_fraction.*0.0"),
        ({"kernel_size": 2.5}, "kernel_size.*2.5"),
    ],
)
def test_options_validation_states_rule_and_value(raw, message):
    with pytest.raises(ValueError, match=message):
        Options(**raw)
    with pytest.raises(UserInputError, match="workload"):
        build_options(Options, raw, "workload")


def test_window_too_long_for_the_data_is_a_user_error():
    with pytest.raises(UserInputError, match="validation windows"):
        TimeseriesClassification(Options(window=5000))


def test_registry_builds_the_workload():
    workload = create_workload("timeseries_classification", {"window": 16, "lstm_hidden": 8, "attention_heads": 2})
    assert isinstance(workload, TimeseriesClassification) and workload.options.window == 16


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_attention_knob_changes_the_kernel(attention):
    workload = small(dropout=0.0)
    names = op_names(workload, workload.build_model(attention), next(workload.train_batches(16, seed=0)))
    if attention == "sdpa":
        assert "aten::_scaled_dot_product_flash_attention_for_cpu" in names
        assert "aten::_softmax" not in names
    else:
        assert not any("scaled_dot_product" in name for name in names)
        assert "aten::_softmax" in names


def test_zero_heads_means_no_attention_layer():
    workload = small(attention_heads=0)
    model = workload.build_model("sdpa")
    assert model.attention is None
    assert not any(isinstance(module, SelfAttention) for module in model.modules())
    names = op_names(workload, model, next(workload.train_batches(16, seed=0)))
    assert not any("scaled_dot_product" in name for name in names) and "aten::_softmax" not in names
    assert workload.checkpoint_blocks(model) == [*model.conv, model.lstm]


def test_bf16_autocast_changes_compute_dtype_and_trains():
    workload = small()
    model = workload.build_model("sdpa")
    dtypes = []
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv1d)):
            module.register_forward_hook(lambda mod, args, out: dtypes.append(out.dtype))
    batch = next(workload.train_batches(16, seed=0))
    workload.training_loss(model, batch)
    assert dtypes and set(dtypes) == {torch.float32}
    dtypes.clear()
    with torch.autocast("cpu", torch.bfloat16):
        loss = workload.training_loss(model, batch)
    assert dtypes and set(dtypes) == {torch.bfloat16}
    assert loss.dtype == torch.float32 and math.isfinite(loss.item())
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_a_few_dozen_steps_reduce_training_loss():
    workload = small(window=16, dropout=0.0)
    model = workload.build_model("sdpa")
    probe = next(workload.train_batches(256, seed=99))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    with torch.no_grad():
        before = workload.training_loss(model, probe).item()
    for batch in itertools.islice(workload.train_batches(64, seed=0), 30):
        optimizer.zero_grad()
        workload.training_loss(model, batch).backward()
        optimizer.step()
    with torch.no_grad():
        after = workload.training_loss(model, probe).item()
    assert after < before - 0.01, (before, after)


def test_checkpoint_blocks_are_modules_of_the_model_and_recompute():
    workload = small(dropout=0.0)
    batch = next(workload.train_batches(16, seed=0))
    grads, counters = {}, {}
    for mode, wrap in [("plain", count_block_runs), ("checkpointed", enable_checkpointing)]:
        model = workload.build_model("eager")
        blocks = workload.checkpoint_blocks(model)
        owned = set(map(id, model.modules()))
        assert len(blocks) == 4 and all(isinstance(b, nn.Module) and id(b) in owned for b in blocks)
        counters[mode] = RecomputeCounter()
        wrap(blocks, counters[mode])
        workload.training_loss(model, batch).backward()
        grads[mode] = [p.grad for p in model.parameters()]
    assert (counters["plain"].forward_runs, counters["plain"].backward_runs) == (4, 0)
    assert (counters["checkpointed"].forward_runs, counters["checkpointed"].backward_runs) == (4, 4)
    for plain, checkpointed in zip(grads["plain"], grads["checkpointed"]):
        torch.testing.assert_close(plain, checkpointed)


def test_lstm_with_interlayer_dropout_is_not_checkpointed():
    workload = small(lstm_layers=2, dropout=0.1)
    model = workload.build_model("eager")
    assert workload.checkpoint_blocks(model) == [*model.conv, model.attention]
    no_dropout = small(lstm_layers=2, dropout=0.0)
    assert no_dropout.build_model("eager").lstm.num_layers == 2
    assert len(no_dropout.checkpoint_blocks(no_dropout.build_model("eager"))) == 4


def test_build_model_is_seeded_and_leaves_global_rng_alone():
    workload = small()
    state = torch.random.get_rng_state()
    a, b = workload.build_model("sdpa"), workload.build_model("eager")
    assert torch.equal(torch.random.get_rng_state(), state)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    c = small(seed=1).build_model("sdpa")
    assert not torch.equal(next(a.parameters()), next(c.parameters()))


def test_evaluate_returns_metrics_over_the_validation_set():
    workload = small()
    model = workload.build_model("sdpa").eval()
    moved = []
    with torch.no_grad():
        metrics = workload.evaluate(model, lambda batch: moved.append(len(batch["labels"])) or batch)
    assert set(metrics) == set(TimeseriesClassification.metrics)
    assert all(type(value) is float for value in metrics.values())
    assert 0.0 <= metrics["val_accuracy"] <= 1.0 and 0.5 < metrics["val_loss"] < 2.0
    assert sum(moved) == len(workload.data.val_ends)
