"""The exact per-column accumulator range of a matmul node, as the frontend stored it."""

from __future__ import annotations

import numpy as np

from prover.inttypes import int_type
from prover.matmul import AccRange, accumulator_range

from .graph import Node


def acc_range(n: Node) -> AccRange:
    """`n.attrs["acc_range"]` (computed once by the frontend while checking the model);
    computed from the weights for a node built without it (hand-made IR in tests)."""
    r = n.attrs.get("acc_range")
    if r is not None:
        return r
    a = n.attrs
    w_zp = np.asarray(a["w_zp"], dtype=np.int64)
    return accumulator_range(a["w"], w_zp, int_type(a["a_type"]), int(a["a_zp"]), a["bias"])
