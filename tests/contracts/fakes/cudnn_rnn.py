"""A CPU LSTM that refuses what cuDNN's RNN refuses: a backward whose forward ran in eval mode.

`aten/src/ATen/native/cudnn/RNN.cpp` (torch 2.11-2.13): `_cudnn_rnn` captures `fn_train` (the `train`
argument nn.LSTM passes as `self.training`) at forward time, and `_cudnn_rnn_backward` begins with
`TORCH_CHECK(fn_train, "cudnn RNN backward can only be called in training mode")`. On CPU no such
check exists, which is why no CPU test saw the probe's eval-mode step crash every CNN-LSTM trial on
an H200. `patched_lstm(monkeypatch)` puts this class in place of `torch.nn.LSTM` for models built
afterwards."""

from __future__ import annotations

import torch
from torch import nn

# aten/src/ATen/native/cudnn/RNN.cpp, _cudnn_rnn_backward.
CUDNN_RNN_EVAL_BACKWARD = "cudnn RNN backward can only be called in training mode"


class _CudnnRnnGrad(torch.autograd.Function):
    """Identity forward; its backward checks the train flag captured at forward, as cuDNN's does."""

    @staticmethod
    def forward(ctx, output: torch.Tensor, fn_train: bool) -> torch.Tensor:
        ctx.fn_train = fn_train
        return output.view_as(output)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        if not ctx.fn_train:
            raise RuntimeError(CUDNN_RNN_EVAL_BACKWARD)
        return grad, None


class CudnnLikeLSTM(nn.LSTM):
    def forward(self, input, hx=None):
        output, state = super().forward(input, hx)
        return _CudnnRnnGrad.apply(output, self.training), state


def patched_lstm(monkeypatch) -> None:
    monkeypatch.setattr(nn, "LSTM", CudnnLikeLSTM)
