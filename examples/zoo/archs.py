"""The zoo's architectures: what each is, its inputs and its quantization variants.

Importing this module needs neither torch nor onnxruntime (`build.py --list` works
without the `zoo` extra); `Arch.module()` builds the torch module (in `nets.py`). The
modules of examples/zoo import each other by plain name: build.py and survey.py put their
own directory first on sys.path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from variants import DYNAMIC, STATIC, Variant, parse

CNN_SIZE = 64  # input resolution of the torchvision CNNs (keeps files and checks small)
SEQ = 16  # token sequence length of the transformers
VOCAB = 128  # tiny vocabulary of the transformers


@dataclass(frozen=True)
class Input:
    """One graph input: float data (standard normal) or integer token ids / masks."""

    name: str
    shape: tuple[int, ...]
    kind: str = "float"  # "float" | "ids" (uniform in [0, high)) | "mask" (all ones)
    high: int = 0

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """A random value of this input (float32, or int64 ids / mask)."""
        if self.kind == "ids":
            return rng.integers(0, self.high, size=self.shape, dtype=np.int64)
        if self.kind == "mask":
            return np.ones(self.shape, dtype=np.int64)
        return rng.standard_normal(self.shape).astype(np.float32)


@dataclass(frozen=True)
class Arch:
    """An architecture of the zoo: `nets.<builder>()` makes its torch module."""

    name: str
    family: str  # cnn | rnn | mlp | bert | vit | gpt2
    builder: str
    inputs: tuple[Input, ...]
    variants: tuple[Variant, ...]
    note: str
    small: bool = False  # part of the committed small set (build.py --small)
    warm_batchnorm: bool = True

    def module(self):
        """The torch module with seeded random weights (imports torch)."""
        import nets

        return getattr(nets, self.builder)()


def _img(size: int = CNN_SIZE) -> tuple[Input, ...]:
    return (Input("input", (1, 3, size, size)),)


def _tokens(mask: bool, vocab: int = VOCAB, seq: int = SEQ) -> tuple[Input, ...]:
    ids = Input("input_ids", (1, seq), "ids", vocab)
    return (ids, Input("attention_mask", (1, seq), "mask")) if mask else (ids,)


def _v(*names: str) -> tuple[Variant, ...]:
    return tuple(parse(n) for n in names)


CNN_VARIANTS = tuple(STATIC)
SEQ_VARIANTS = tuple(STATIC) + tuple(DYNAMIC)

_TV = "torchvision.models.{} (weights=None), {}x{} input"

ARCHS: tuple[Arch, ...] = (
    # torchvision CNNs at full width, small input
    *(
        Arch(n, "cnn", n, _img(), CNN_VARIANTS, _TV.format(n, CNN_SIZE, CNN_SIZE))
        for n in (
            "mobilenet_v2",
            "mobilenet_v3_small",
            "efficientnet_b0",
            "resnet18",
            "shufflenet_v2_x0_5",
            "squeezenet1_0",
            "mnasnet0_5",
            "regnet_x_400mf",
        )
    ),
    Arch(
        "lstm",
        "rnn",
        "lstm",
        (Input("input", (1, 8, 32)),),
        SEQ_VARIANTS,
        "nn.LSTM(32, 64, 1 layer, batch_first) on 8 steps -> Linear(64, 10) on the last step",
    ),
    Arch(
        "gru",
        "rnn",
        "gru",
        (Input("input", (1, 8, 32)),),
        SEQ_VARIANTS,
        "nn.GRU(32, 64, 2 layers, batch_first) on 8 steps -> Linear(64, 10) on the last step",
    ),
    Arch(
        "mlp",
        "mlp",
        "mlp",
        (Input("input", (1, 64)),),
        tuple(STATIC) + _v("dyn_u8s8_pt"),
        "Linear 64->128 ReLU ->64 Sigmoid ->32 Tanh ->10",
        small=True,
        warm_batchnorm=False,
    ),
    Arch(
        "bert",
        "bert",
        "bert",
        _tokens(mask=True),
        SEQ_VARIANTS,
        f"transformers BertModel: 2 layers, hidden 64, 2 heads, ffn 128, vocab {VOCAB}, {SEQ} tokens",
    ),
    Arch(
        "vit",
        "vit",
        "vit",
        (Input("pixel_values", (1, 3, 32, 32)),),
        SEQ_VARIANTS,
        "transformers ViTModel: 2 layers, hidden 64, 2 heads, ffn 128, 32x32 image, 8x8 patches",
    ),
    Arch(
        "gpt2",
        "gpt2",
        "gpt2",
        _tokens(mask=True),  # without a mask, transformers traces aten::diff (no ONNX form)
        SEQ_VARIANTS,
        f"transformers GPT2LMHeadModel: 2 layers, hidden 64, 2 heads, vocab {VOCAB}, {SEQ} tokens",
    ),
    # the committed small set (examples/zoo/small/): a few KB to ~100 KB each
    Arch(
        "tiny_cnn",
        "cnn",
        "tiny_cnn",
        _img(16),
        _v("qop_u8s8_pt", "qop_s8s8_pc", "qdq_u8s8_pc", "qdq_s8s8_pt", "qdq_u8s8_pc_pre"),
        "conv3x3+BN+ReLU, depthwise conv3x3+BN+ReLU6, conv1x1+BN, residual add, "
        "global average pool, Linear; 16x16 input, 8-16 channels",
        small=True,
    ),
    Arch(
        "tiny_lstm",
        "rnn",
        "tiny_lstm",
        (Input("input", (1, 4, 8)),),
        _v("dyn_u8s8_pt", "qdq_u8s8_pt", "qop_u8s8_pt"),
        "nn.LSTM(8, 16) on 4 steps -> Linear(16, 4) on the last step",
        small=True,
        warm_batchnorm=False,
    ),
    Arch(
        "tiny_bert",
        "bert",
        "tiny_bert",
        _tokens(mask=True, vocab=64, seq=8),
        _v("dyn_u8s8_pt", "dyn_u8s8_pc", "qdq_u8s8_pt"),
        "transformers BertModel: 1 layer, hidden 32, 2 heads, ffn 64, vocab 64, 8 tokens",
        small=True,
        warm_batchnorm=False,
    ),
)

BY_NAME = {a.name: a for a in ARCHS}


def select(names: list[str] | None, small: bool) -> list[Arch]:
    """The architectures named (all of the set when none): the small set or the full zoo."""
    pool = (
        [a for a in ARCHS if a.small]
        if small
        else [a for a in ARCHS if not a.name.startswith("tiny_")]
    )
    if not names:
        return pool
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown architecture(s): {', '.join(unknown)} (see --list)")
    return [BY_NAME[n] for n in names]
