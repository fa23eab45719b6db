"""Torch modules of the zoo, each with seeded random weights (needs the `zoo` extra).

Every builder seeds torch itself, so a module does not depend on what was built before it.
Hugging Face models are made from a config (never from a hub checkpoint) and wrapped so
the export has exactly one float output.
"""

from __future__ import annotations

import torch
from torch import nn

SEED = 0
TOKENS = ("input_ids", "attention_mask")


def _seeded() -> None:
    torch.manual_seed(SEED)


def _torchvision(name: str, **kw) -> nn.Module:
    import torchvision

    _seeded()
    return getattr(torchvision.models, name)(weights=None, **kw)


def mobilenet_v2() -> nn.Module:
    return _torchvision("mobilenet_v2")


def mobilenet_v3_small() -> nn.Module:
    return _torchvision("mobilenet_v3_small")


def efficientnet_b0() -> nn.Module:
    return _torchvision("efficientnet_b0")


def resnet18() -> nn.Module:
    return _torchvision("resnet18")


def shufflenet_v2_x0_5() -> nn.Module:
    return _torchvision("shufflenet_v2_x0_5")


def squeezenet1_0() -> nn.Module:
    return _torchvision("squeezenet1_0")


def mnasnet0_5() -> nn.Module:
    return _torchvision("mnasnet0_5")


def regnet_x_400mf() -> nn.Module:
    return _torchvision("regnet_x_400mf")


class _LastStep(nn.Module):
    """A recurrent layer over the sequence, then a Linear head on the last step."""

    def __init__(self, rnn: nn.Module, hidden: int, classes: int) -> None:
        super().__init__()
        self.rnn = rnn
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(x)
        return self.head(y[:, -1, :])


def lstm() -> nn.Module:
    _seeded()
    return _LastStep(nn.LSTM(32, 64, num_layers=1, batch_first=True), 64, 10)


def gru() -> nn.Module:
    _seeded()
    return _LastStep(nn.GRU(32, 64, num_layers=2, batch_first=True), 64, 10)


def tiny_lstm() -> nn.Module:
    _seeded()
    return _LastStep(nn.LSTM(8, 16, batch_first=True), 16, 4)


def mlp() -> nn.Module:
    _seeded()
    return nn.Sequential(
        nn.Linear(64, 128),
        nn.ReLU(),
        nn.Linear(128, 64),
        nn.Sigmoid(),
        nn.Linear(64, 32),
        nn.Tanh(),
        nn.Linear(32, 10),
    )


class _TinyBlock(nn.Module):
    """Stem conv3x3, then an inverted-residual-like block with a residual add, pool, head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU()
        )
        self.dw = nn.Sequential(
            nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), nn.BatchNorm2d(8), nn.ReLU6()
        )
        self.pw = nn.Sequential(nn.Conv2d(8, 8, 1, bias=False), nn.BatchNorm2d(8))
        self.down = nn.Sequential(
            nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.stem(x)
        y = s + self.pw(self.dw(s))
        y = self.pool(self.down(y))
        return self.head(torch.flatten(y, 1))


def tiny_cnn() -> nn.Module:
    _seeded()
    return _TinyBlock()


class _HiddenStates(nn.Module):
    """A Hugging Face model returning one tensor (last hidden state, or the LM logits)."""

    def __init__(self, model: nn.Module, field: str, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.field = field
        self.names = names  # the model's keyword for each positional input

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        kw = dict(zip(self.names, args, strict=True))
        return getattr(self.model(**kw, return_dict=True), self.field)


def _bert(layers: int, hidden: int, ffn: int, vocab: int) -> nn.Module:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=ffn,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    _seeded()
    return _HiddenStates(BertModel(cfg, add_pooling_layer=False), "last_hidden_state", TOKENS)


def bert() -> nn.Module:
    return _bert(2, 64, 128, 128)


def tiny_bert() -> nn.Module:
    return _bert(1, 32, 64, 64)


def vit() -> nn.Module:
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(
        image_size=32,
        patch_size=8,
        num_channels=3,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        attn_implementation="eager",
    )
    _seeded()
    return _HiddenStates(
        ViTModel(cfg, add_pooling_layer=False), "last_hidden_state", ("pixel_values",)
    )


def gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=128,
        n_positions=64,
        n_embd=64,
        n_layer=2,
        n_head=2,
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation="eager",
    )
    _seeded()
    return _HiddenStates(GPT2LMHeadModel(cfg), "logits", TOKENS)
