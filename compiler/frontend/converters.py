"""Every converter of the frontend: importing this module registers them all in
`compiler.frontend.registry.REGISTRY` (the dispatcher in `reader.py` imports it)."""

from .ops import (
    constant,
    conv,
    dynamic_matmul,
    elementwise,
    host,
    layout,
    matmul,
    pool,
    project,
    qdq,
)

ALL_FAMILIES = (
    constant, conv, dynamic_matmul, elementwise, host, layout, matmul, pool, project, qdq,
)  # fmt: skip
