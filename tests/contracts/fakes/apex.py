"""A CPU reference of NVIDIA apex's FusedAdam (apex/optimizers/fused_adam.py, HEAD 6424da3, 2026-07-08) and its
amp_C extension. What matters to hpo, kept as upstream has it:
- `def zero_grad(self):` takes no argument (and sets the grads to None by default);
- the state is created with aten ops on the first step only; every step then launches
  amp_C.multi_tensor_adam through multi_tensor_applier, which torch.profiler does not record as an
  op. The reference runs its kernel on another thread (as a device runs a launched kernel), so no
  op shows inside Optimizer.step on the calling thread either.
"""

from __future__ import annotations

import threading

import torch

ADAM_MODE_ADAMW = 1


def multi_tensor_adam(*args):
    """amp_C.multi_tensor_adam (csrc/multi_tensor_adam.cu): AdamW in place, launched off this thread."""
    worker = threading.Thread(target=_adam_kernel, args=args)
    worker.start()
    worker.join()


def _adam_kernel(chunk_size, noop_flag, tensor_lists, lr, beta1, beta2, eps, step, mode, bias_correction, weight_decay):
    grads, params, exp_avgs, exp_avg_sqs = ([t.detach().numpy() for t in ts] for ts in tensor_lists)
    c1 = 1 - beta1**step if bias_correction else 1.0
    c2 = 1 - beta2**step if bias_correction else 1.0
    for g, p, m, v in zip(grads, params, exp_avgs, exp_avg_sqs):
        if mode == ADAM_MODE_ADAMW:
            p *= 1 - lr * weight_decay
        m *= beta1
        m += (1 - beta1) * g
        v *= beta2
        v += (1 - beta2) * g * g
        p -= lr * (m / c1) / ((v / c2) ** 0.5 + eps)


class FusedAdam(torch.optim.Optimizer):
    def __init__(
        self,
        params,
        lr=1e-3,
        bias_correction=True,
        betas=(0.9, 0.999),
        eps=1e-8,
        adam_w_mode=True,
        weight_decay=0.0,
        amsgrad=False,
        set_grad_none=True,
        capturable=False,
        master_weights=False,
    ):
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self.adam_w_mode = 1 if adam_w_mode else 0
        self.set_grad_none = set_grad_none

    def zero_grad(self):  # apex's signature: no set_to_none argument
        if self.set_grad_none:
            for group in self.param_groups:
                for p in group["params"]:
                    p.grad = None
        else:
            super().zero_grad()

    @torch.no_grad()
    def step(self, closure=None, grads=None, output_params=None, scale=None, grad_norms=None, grad_scaler=None):
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            group["step"] = group.get("step", 0) + 1
            for p in params:
                if p.grad.is_sparse:
                    raise RuntimeError("FusedAdam does not support sparse gradients, please consider SparseAdam instead")
                if p.dtype not in (torch.float16, torch.bfloat16, torch.float32):
                    raise RuntimeError("FusedAdam only support fp16 and fp32.")
                state = self.state[p]
                if not state:  # first step: the only aten ops apex runs
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
            beta1, beta2 = group["betas"]
            lists = [
                [p.grad for p in params],
                params,
                [self.state[p]["exp_avg"] for p in params],
                [self.state[p]["exp_avg_sq"] for p in params],
            ]
            multi_tensor_adam(
                2048 * 32, None, lists, group["lr"], beta1, beta2, group["eps"], group["step"],
                self.adam_w_mode, group["bias_correction"], group["weight_decay"],
            )  # fmt: skip


FusedAdam.__module__ = "apex.optimizers.fused_adam"
