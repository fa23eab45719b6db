"""Float ONNX export of a zoo architecture: warm BatchNorm statistics, then torch.onnx.export."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch

OPSET = 17
WARM_STEPS = 8  # forward passes in train mode that set BatchNorm's running statistics


def randomize_constant_parameters(model: torch.nn.Module, seed: int = 0) -> int:
    """Give every parameter the library initialises to one constant (zero biases, BatchNorm
    and LayerNorm scale 1 / shift 0) seeded random values, as a trained network has.

    Constant parameters are not only unrealistic: the exporter deduplicates equal
    initializers into one tensor shared through Identity nodes, which ORT's QOperator
    quantizer cannot take as a Conv bias. Returns the number of parameters changed.
    """
    g = torch.Generator().manual_seed(seed)
    changed = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.numel() < 2 or not bool((p == p.flatten()[0]).all()):
                continue
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if name.endswith("weight"):  # a norm's scale: around 1
                p.copy_(1.0 + 0.2 * noise)
            else:
                p.copy_(0.1 * noise)
            changed += 1
    return changed


def warm_batchnorm(model: torch.nn.Module, sample, steps: int = WARM_STEPS) -> None:
    """Run `steps` batches of random data in train mode so every BatchNorm's running mean and
    variance come from data (not the init's 0 / 1), then switch to eval."""
    if not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        return
    model.train()
    with torch.no_grad():
        for i in range(steps):
            model(*(torch.from_numpy(a) for a in sample(1000 + i, batch=4)))


def export(arch, out: Path, sample) -> Path:
    """Write the float model of `arch` to `out` (opset 17, TorchScript exporter, static shapes).

    `sample(seed, batch=1)` gives a tuple of numpy inputs in the order of `arch.inputs`.
    """
    model = arch.module()
    randomize_constant_parameters(model)
    if arch.warm_batchnorm:
        warm_batchnorm(model, sample)
    model.eval()
    args = tuple(torch.from_numpy(a) for a in sample(0))
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # tracer and deprecation warnings of the exporter
        torch.onnx.export(
            model,
            args,
            str(out),
            input_names=[i.name for i in arch.inputs],
            output_names=["output"],
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,  # the TorchScript exporter: offline, no onnxscript needed
        )
    return out


def sampler(arch):
    """`sample(seed, batch=1)`: random inputs of `arch` (numpy, in graph input order)."""

    def sample(seed: int, batch: int = 1) -> tuple[np.ndarray, ...]:
        rng = np.random.default_rng(seed)
        outs = []
        for inp in arch.inputs:
            a = np.concatenate([inp.sample(rng) for _ in range(batch)], axis=0)
            outs.append(a)
        return tuple(outs)

    return sample
