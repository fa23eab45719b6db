"""A two-activation QLinearAdd/QLinearMul (`eltwise`) followed by an activation table, as a site.

The elementwise unit applies a table to its result (`[eltwise] functions`), so
`eltwise -> lut` is a fusion candidate like `matmul -> lut`. The seed's boundaries are
the same rules (region refusals, already fused, multiple users), judged by legality;
what is specific to this compute op lives here:

- adjacency: the table must read the op's result directly (a requantize, clip or
  layout op between them is not part of the unit: `not_adjacent`);
- support: the unit must run the op itself (`unsupported_eltwise`) and apply this
  function (`unsupported_function`); the table it loads is the node's own where the
  unit loads any table (`table`), else its toolchain's build of the named function;
- the obligation: for every pair (a, b) of 8-bit operands, ORT's kernel then the
  activation's table equals the unit's record then the loaded table
  (`obligation`, decided by enumeration of the 65,536 pairs);
- the rewrite (`apply`): one `eltwise` node carrying the table (`post_lut`), the
  activation node it replaces (`post_reference`, whose meaning the lowering proves
  again) and the function.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from npu_backend.postprocess import LutParams
from npu_backend.target import Target
from npu_backend.validate import broadcast_kind
from prover.eltwise import EltwiseParams
from prover.inttypes import int_type
from prover.lut import LOADED_TABLE, build_lut, reorder_table
from prover.obligation import Obligation
from prover.qlinear_binary import SpanMode
from prover.terms import Var, op
from prover.verdict import ReasonCode

from .epilogue import lut_spec_of
from .graph import Graph, Node
from .reasons import Reason
from .semantics import eltwise_term, node_term, qlinear_binary_params
from .site import Site

BINARY = {"QLinearAdd": "add", "QLinearMul": "mul"}


def is_eltwise_site(site: Site) -> bool:
    return site.compute.op == "eltwise"


def _names(nodes: list[Node]) -> str:
    return ", ".join(f"'{o}'" for n in nodes for o in n.origin)


def record(n: Node, target: Target) -> EltwiseParams:
    """The unit's parameter record for `eltwise` node `n` on `target`."""
    a = n.attrs
    mode = SpanMode(a["mode"])
    return EltwiseParams.of(a["binary"], qlinear_binary_params(n), mode, fma=target.eltwise.fma)


def unit_reason(n: Node, target: Target) -> Reason | None:
    """Why the target's elementwise unit cannot run `n` at all (None: it can)."""
    caps = target.eltwise
    a = n.attrs
    kind = broadcast_kind(tuple(a["a_shape"]), tuple(a["b_shape"]))
    why = None
    if BINARY[a["binary"]] not in caps.ops:
        why = f"the elementwise unit of '{target.name}' has no {BINARY[a['binary']]}"
    elif a["params"]["dtype"] not in caps.types:
        why = f"the elementwise unit reads {sorted(caps.types)}, not {a['params']['dtype']}"
    elif kind not in caps.broadcast:
        why = f"operands broadcast as '{kind}'; the unit reads {sorted(caps.broadcast)}"
    return None if why is None else Reason(ReasonCode.UNSUPPORTED_ELTWISE, f"{_names([n])}: {why}")


def npu_table(act: Node, target: Target) -> tuple[str, LutParams] | Reason:
    """The function the unit applies for activation `act` and the table it loads."""
    fs = target.eltwise.functions
    f = str(act.attrs["function"])
    it, ot = act.attrs["in_type"], act.attrs["out_type"]
    if LOADED_TABLE in fs:  # the node's own table (ORT's), loaded as given
        order = target.lut_builder.index_order
        table = reorder_table(
            np.asarray(act.attrs["table"], np.int64), int_type(it), "offset", order
        )
        return LOADED_TABLE, LutParams(tuple(int(v) for v in table), it, ot, order)
    if f not in fs:
        return Reason(
            ReasonCode.UNSUPPORTED_FUNCTION,
            f"the elementwise unit of '{target.name}' applies no '{f}' table "
            f"(functions {sorted(fs)}); {_names([act])} stays a separate op",
        )
    spec = lut_spec_of(act, target)
    return f, LutParams(tuple(int(v) for v in build_lut(spec)), it, ot, spec.index_order, spec)


def judge(g: Graph, site: Site, target: Target) -> Reason | tuple[str, LutParams]:
    """The eltwise-specific checks after the shared rules: the reason, or (function, table)."""
    if site.compute.attrs.get("post_lut") is not None:
        return Reason(
            ReasonCode.ALREADY_FUSED,
            f"{_names([site.compute])} already carries the fused function "
            f"'{site.compute.attrs['post_function']}'; {_names([site.activation])} stays "
            "a separate op",
        )
    inner = [m for m in site.chain[:-1] if m.op == "lut"]
    if inner:
        return Reason(
            ReasonCode.ALREADY_FUSED,
            f"{_names(inner)} would already be fused into {_names([site.compute])}; "
            f"{_names([site.activation])} stays a separate op (the elementwise unit applies "
            "one table; table composition is offered for matmul sites only)",
        )
    if site.chain[:-1]:
        return Reason(
            ReasonCode.NOT_ADJACENT,
            f"{_names(site.chain[:-1])} between {_names([site.compute])} and "
            f"{_names([site.activation])}: the elementwise unit applies its table to its own "
            "result only",
        )
    bad = unit_reason(site.compute, target)
    if bad is not None:
        return bad
    return npu_table(site.activation, target)


def obligation(site: Site, target: Target, policy: Any) -> Obligation:
    """ORT's op then the activation's table, against the unit's record then its table."""
    n, act = site.compute, site.activation
    _, lut = site.post
    before = node_term(act, eltwise_term(n, Var("a"), Var("b")))
    after = lut.term(op("npu_eltwise", Var("a"), Var("b"), **record(n, target).params()))
    t = int_type(n.attrs["params"]["dtype"])
    rng = {"a": (t.min, t.max), "b": (t.min, t.max)}
    return Obligation("epilogue", before, after, rng, policy, note=f"fuse {site.id}")


def apply(g: Graph, site: Site) -> Node:
    """Replace the site's `eltwise` node and activation by one `eltwise` node with a table."""
    n, act = g.node(site.compute.name), g.node(site.activation.name)
    function, lut = site.post
    origin = tuple(dict.fromkeys((*n.origin, *act.origin)))
    attrs = dict(
        n.attrs, post_lut=lut, post_function=function, post_reference=act, site=site.id,
        pattern=site.pattern,
    )  # fmt: skip
    fused = Node(n.name, "eltwise", list(n.inputs), [act.output], attrs, origin)
    g.nodes[g.index(act)] = fused
    g.nodes = [m for m in g.nodes if m is not n]
    g.prune_values()
    return fused
