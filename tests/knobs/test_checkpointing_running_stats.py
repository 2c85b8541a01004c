"""A checkpointed block's recomputation in backward runs its forward again in train mode; it must not
update BatchNorm's running statistics (or any buffer the forward keeps a running value in) a second
time, so a checkpointed model evaluates exactly as the unchecked one it trains like."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from hpo.knobs.recompute import RecomputeCounter, enable_checkpointing

STEPS = 3


class ConvBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


class CountingBlock(nn.Module):
    """Not a norm layer: a buffer this forward adds to in train mode, as an EMA or an observer does."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.register_buffer("seen", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.seen.add_(x.shape[0])
        return torch.tanh(self.linear(x))


def _model(block: type[nn.Module]) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(block(), block())


def _train(model: nn.Module, shape: tuple[int, ...]) -> list[torch.Tensor]:
    """STEPS SGD steps on seeded batches; the losses, so the two runs can be compared."""
    optimizer, losses = torch.optim.SGD(model.parameters(), lr=0.1), []
    generator = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        loss = model(torch.randn(shape, generator=generator)).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
    return losses


def _checkpointed(model: nn.Sequential) -> tuple[nn.Sequential, RecomputeCounter]:
    copied, counter = copy.deepcopy(model), RecomputeCounter()
    enable_checkpointing(list(copied), counter)
    return copied, counter


@pytest.mark.parametrize("early_stop", [True, False])
def test_batchnorm_statistics_count_each_step_once_in_checkpointed_blocks(early_stop):
    """With early stop (torch's default) checkpoint ends the recomputation by raising inside it, once
    it has recomputed relu's output, the last tensor backward needs: after BatchNorm's update."""
    plain = _model(ConvBlock)
    checked, counter = _checkpointed(plain)
    with torch.utils.checkpoint.set_checkpoint_early_stop(early_stop):
        plain_losses, checked_losses = _train(plain, (8, 4, 6, 6)), _train(checked, (8, 4, 6, 6))
    assert counter.backward_runs == 2 * STEPS  # each block was recomputed in every backward
    torch.testing.assert_close(checked_losses, plain_losses, rtol=0, atol=0)  # recomputed outputs unchanged
    for block, reference in zip(checked, plain):
        assert block.bn.num_batches_tracked.item() == STEPS
        torch.testing.assert_close(block.bn.running_mean, reference.bn.running_mean)
        torch.testing.assert_close(block.bn.running_var, reference.bn.running_var)
    checked.eval(), plain.eval()
    x = torch.randn(2, 4, 6, 6)
    torch.testing.assert_close(checked(x), plain(x))  # the statistics evaluation uses


def test_any_buffer_the_forward_writes_is_written_once_per_step():
    checked, counter = _checkpointed(_model(CountingBlock))
    _train(checked, (5, 4))
    assert counter.backward_runs == 2 * STEPS
    assert [block.seen.item() for block in checked] == [5 * STEPS] * 2


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["aot_eager"])
def test_compiled_checkpointed_blocks_count_each_step_once(backend):
    """Under torch.compile the wrapper is traced, not run: the compiled graph applies the update once."""
    plain = _model(ConvBlock)
    checked, _ = _checkpointed(plain)
    torch.testing.assert_close(_train(torch.compile(checked, backend=backend), (8, 4, 6, 6)), _train(plain, (8, 4, 6, 6)))
    for block, reference in zip(checked, plain):
        assert block.bn.num_batches_tracked.item() == STEPS
        torch.testing.assert_close(block.bn.running_mean, reference.bn.running_mean)
