"""The NPU instruction set (instructions as data, semantics via the kernel primitives).

`PostProcess` (the fused MatMul epilogue descriptor) is defined in
`npu_backend.postprocess` and re-exported here.
"""

from __future__ import annotations

from .postprocess import LutParams, Post, PostProcess, RequantParams, apply_columns

__all__ = ["LutParams", "Post", "PostProcess", "RequantParams", "apply_columns"]
