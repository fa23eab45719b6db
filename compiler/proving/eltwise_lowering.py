"""Lowering a two-activation QLinearAdd / QLinearMul onto the target's elementwise unit (a
mixin of the lowering pass, `compiler.passes.lower.Lowerer`).

The mixin expects the lowering's attributes: `t` (the target), `steps`, and its `issues`,
`diag`, `prove`, `npu_or_host`, `host_origin`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compiler.ir.graph import Node
from compiler.ir.semantics import eltwise_term, node_term, qlinear_binary_params
from npu_backend.lowered import NpuEltwise
from prover.eltwise import EltwiseParams
from prover.inttypes import int_type
from prover.qlinear_binary import SpanMode
from prover.terms import Term, Var, op
from prover.verdict import ReasonCode


class EltwiseLowering:
    """The elementwise unit's lowering: `eltwise`."""

    t: Any
    steps: list[Any]
    # the lowering's own methods (annotations only: nothing here shadows them)
    issues: Callable[..., list[Any]]
    diag: Callable[..., None]
    prove: Callable[..., tuple[bool, ReasonCode | None, str]]
    npu_or_host: Callable[..., None]
    host_origin: Callable[[Node], list[Any]]

    def eltwise(self, n: Node) -> None:
        """A QLinearAdd/QLinearMul of two activations (with a fused table after a proven
        site: `post_lut`) on the target's elementwise unit, its record computed from the
        node's scales. The unit's form is checked first, then the obligation that it equals
        ORT's kernel on every operand pair (and through the table) is proven; else the
        original nodes run on the host."""
        a = n.attrs
        caps = self.t.eltwise
        params = qlinear_binary_params(n)
        rec = EltwiseParams.of(a["binary"], params, SpanMode(a["mode"]), fma=caps.fma)
        before = eltwise_term(n, Var("a"), Var("b"))
        after: Term = op("npu_eltwise", Var("a"), Var("b"), **rec.params())
        lut = a.get("post_lut")  # the NPU's table (`LutParams`) of a fused activation
        function = a.get("post_function")
        if lut is not None:
            ref = a["post_reference"]  # the activation's own node: ORT's table
            before = node_term(ref, before)
            after = lut.term(after)
        step = NpuEltwise(
            name=n.name, a=n.inputs[0], b=n.inputs[1], out=n.output, record=rec,
            a_shape=tuple(a["a_shape"]), b_shape=tuple(a["b_shape"]), lut=lut,
            function=function, onnx_nodes=tuple(n.origin),
        )  # fmt: skip
        issues = self.issues(step)
        if issues:
            why = ReasonCode(issues[0].code)
            self.diag(n, why, f"{', '.join(n.origin)} stays on the host: {issues[0].message}")
            self.steps.extend(self.host_origin(n))
            return
        t = int_type(params.dtype)
        rng = {"a": (t.min, t.max), "b": (t.min, t.max)}
        ok, code, msg = self.prove(n, "lowering", before, after, rng)
        self.npu_or_host(n, step, ok, code, msg, lambda: self.host_origin(n))
