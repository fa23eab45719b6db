"""Make the model zoo (the issues' name for `build.py`, which it runs unchanged).

    pip install -e ".[zoo]"                               # torch, torchvision, transformers
    python3 examples/zoo/make_zoo.py --list               # what it builds (no torch needed)
    python3 examples/zoo/make_zoo.py --out /tmp/zoo       # the whole zoo
    python3 examples/zoo/make_zoo.py --out /tmp/zoo --only resnet18 bert

Every option is `build.py`'s (see its docstring and README.md here): the torchvision CNNs
(mobilenet_v2, mobilenet_v3_small, efficientnet_b0, resnet18 and four more) in the four
ways the convolution issue lists (QOperator u8s8 per tensor, QOperator s8s8 per channel,
QDQ u8s8 per channel, QDQ s8s8 per tensor) and the other static ones, each also through
`quant_pre_process`; the LSTM/GRU and the BERT, ViT and GPT-2 transformers statically and
dynamically, and through `quant_pre_process`.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from build import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
