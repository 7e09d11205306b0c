"""What the trainers share: AdamW with linear warm-up and decay, optional bf16 autocast."""

from __future__ import annotations

import contextlib


def warmup_linear(step: int, steps: int, warmup: int) -> float:
    """The learning-rate factor: 0 -> 1 over ``warmup`` steps, then 1 -> 0 linearly at ``steps``."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (steps - step) / max(1, steps - warmup))


def optimizer(params, *, lr: float, steps: int, warmup_fraction: float):
    """AdamW (weight decay 0.01) and its warm-up + linear-decay scheduler, stepped once per step."""
    import torch

    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    warmup = round(steps * warmup_fraction)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda step: warmup_linear(step, steps, warmup))


def autocast(bf16: bool):
    """bfloat16 autocast on CPU (about twice as fast for MiniLM here), or nothing."""
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
