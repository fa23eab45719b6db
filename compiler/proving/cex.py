"""Lifting a refuted epilogue obligation to whole-model inputs, and replaying it.

The prover gives an accumulator value and an input row of the compute op reaching
it. The row is placed in row 0 of a compute input filled with the zero point,
traced back to the graph inputs (through layout ops, and through a QuantizeLinear
by choosing float values that quantize to it, checked by running it), then both
the original model (ONNX Runtime, or the IR reference where the model uses the
project domain) and the fused form (the kernel's concrete evaluation of the fused
IR) are run. The site's output element must equal the prover's `before` and
`after`; anything else is a bug in the tool and raises `InternalError`.
"""

from __future__ import annotations

import numpy as np

from compiler.errors import CompilerError, InternalError
from compiler.frontend.reader import PROJECT_DOMAIN
from compiler.ir.graph import Graph, Node
from compiler.ir.semantics import from_natural, run_graph, to_natural
from compiler.ir.site import Site, WholeModelCounterexample
from compiler.ort.host import run_host
from prover.errors import LiftError
from prover.lift import lift_row, row_value
from prover.obligation import LiftSpec
from prover.terms import PreconditionViolation
from prover.verdict import Counterexample, ReasonCode


def lift_spec(node: Node, j: int) -> LiftSpec:
    """How the accumulator of column `j` of matmul `node` is produced by an input row: the
    weights column, `w_zp` (one per column, or one for all), `a_zp`, input type, bias."""
    a = node.attrs
    zp = a["w_zp"]  # np.ndim would copy a per-column tuple: O(columns) per call
    w_zp = zp[j] if isinstance(zp, tuple | list) or getattr(zp, "ndim", 0) > 0 else zp
    bias = 0 if a["bias"] is None else int(a["bias"][j])
    return LiftSpec("acc", a["w"][:, j], int(w_zp), int(a["a_zp"]), a["a_type"], bias)


def _place_patch(node: Node, A: np.ndarray, row, j: int) -> tuple[int, ...] | None:
    """Write `row` (a patch of column `j`'s group, `prover.conv.patches` order) into the
    channels-last input `A` at the first output element whose patch reads no padding;
    that element's (batch, *out_spatial) index, or None when every patch reads padding."""
    win = node.attrs["window"]
    r, spatial = win.rank, A.shape[1:-1]
    out_sp = win.out_spatial(tuple(spatial))
    first = []
    for i in range(r):
        o = -(-win.pads[i] // win.strides[i])  # the first output whose patch starts inside
        if (
            o >= out_sp[i]
            or o * win.strides[i] - win.pads[i] + (win.kernel[i] - 1) * win.dilations[i]
            >= spatial[i]
        ):
            return None
        first.append(o)
    per_group = A.shape[-1] // win.group
    g = j // (int(node.attrs["w"].shape[1]) // win.group)
    vals = np.asarray(row, dtype=np.int64).reshape(per_group, -1)
    for t, offs in enumerate(np.ndindex(*win.kernel)):
        where = tuple(
            first[i] * win.strides[i] - win.pads[i] + offs[i] * win.dilations[i] for i in range(r)
        )
        A[(0, *where, slice(g * per_group, (g + 1) * per_group))] = vals[:, t]
    return (0, *first)


def find_row(
    node, columns, acc: int, hint: tuple[int, ...] | None, hint_col: int
) -> tuple[int, tuple[int, ...]]:
    """(column, row) such that the row's accumulator in that column is `acc`."""
    if hint is not None and row_value(lift_spec(node, hint_col), hint) == acc:
        return hint_col, tuple(hint)
    for j in columns:
        try:
            return j, lift_row(lift_spec(node, j), acc)
        except LiftError:
            continue
    raise InternalError(
        f"refuted accumulator {acc} is not reachable in columns {list(columns)[:8]}"
    )


def _to_inputs(
    g: Graph, value: str, tensor: np.ndarray
) -> tuple[dict[str, np.ndarray] | None, str]:
    """Graph inputs that make `value` equal `tensor` (others zero), or (None, why)."""
    feeds: dict[str, np.ndarray] = {}
    cur, t = value, tensor
    while cur not in g.inputs:
        p = g.producer(cur)
        if p is None:
            return None, f"'{cur}' has no producer"
        src = g.values[p.inputs[0]]
        if p.op in ("identity",):
            pass
        elif p.op == "reshape":
            t = t.reshape(src.shape)
        elif p.op == "transpose":
            t = np.transpose(t, np.argsort(p.attrs["perm"]))
        elif p.op == "host_onnx" and p.attrs.get("onnx_op") == "QuantizeLinear":
            consts = p.attrs["consts"]
            import onnx

            q = onnx.NodeProto.FromString(p.attrs["nodes"][0])
            scale = np.float32(np.asarray(consts[q.input[1]]).reshape(()))
            zp = (
                int(np.asarray(consts[q.input[2]]).reshape(()))
                if len(q.input) > 2 and q.input[2]
                else 0
            )
            f = ((t.astype(np.float64) - zp) * np.float64(scale)).astype(np.float32)
            got = run_host(p, g.values, g.opsets, {p.inputs[0]: f})[0]
            if not np.array_equal(np.asarray(got, dtype=np.int64), t.astype(np.int64)):
                return None, f"float values for '{p.inputs[0]}' do not quantize back to the row"
            t = f
        else:
            return None, f"'{cur}' is computed by '{p.name}' ({p.op}); cannot choose its value"
        cur = p.inputs[0]
    feeds[cur] = t.astype(np.dtype(g.values[cur].dtype))
    for name in g.inputs:
        if name not in feeds:
            v = g.values[name]
            feeds[name] = np.zeros(v.shape, dtype=np.dtype(v.dtype))
    return feeds, ""


def _against_ort(g: Graph, site: Site, feeds, env0, ctx, base: WholeModelCounterexample):
    """ONNX Runtime's outputs on `feeds`, checked against the IR under this host's profile.

    Equal to the IR under the chosen reference: ORT's outputs are the expected ones. Where
    this host's ORT computes otherwise than the chosen reference (e.g. u8s8 pair
    saturation), the IR under the reference stays the expected output and the
    difference is a `reference_divergence` with this input. ORT differing from the IR
    under the host's own profile is a bug in the tool.
    """
    from compiler.ort.reference_host import host_profile, same_semantics
    from compiler.ort.tables import session

    reference = ctx.reference
    names = [o.name for o in ctx.model.graph.output]
    ort_out = dict(zip(names, session(ctx.model).run(None, feeds), strict=True))
    host = host_profile()
    env_h = env0
    if reference is not None and not same_semantics(host, reference):
        g_host = g
        if host.mlas_fma != reference.mlas_fma:  # the tables differ too: lower again
            from compiler.frontend.reader import to_ir

            g_host = to_ir(ctx.model, reference=host)[0]
        try:
            env_h = run_graph(g_host, feeds, keep_all=True, reference=host)
        except CompilerError:
            # no meaning under the host's profile (a u8s8 conv whose pairs can saturate, in
            # an order not modelled): ORT's own outputs are compared with the reference's
            env_h = {o: ort_out[o] for o in g.outputs if o in ort_out}
    for o in g.outputs:
        if o in ort_out and not np.array_equal(np.asarray(ort_out[o]), np.asarray(env_h[o])):
            raise InternalError(
                f"IR reference (profile {host.name}) differs from ONNX Runtime on output '{o}'"
            )
    diverged = [o for o in g.outputs if o in env_h and not np.array_equal(env_h[o], env0[o])]
    if not diverged:
        return ort_out, "onnxruntime"
    name = reference.name
    base.note = (
        f"reference_divergence: this host's ONNX Runtime ({host.name}) computes otherwise than "
        f"reference {name} on this input (outputs {', '.join(diverged)}); expected is {name}'s"
    )
    finding = {
        "code": ReasonCode.REFERENCE_DIVERGENCE.value,
        "nodes": site.nodes,
        "message": f"{site.id}: {base.note}",
        "inputs": {k: np.asarray(v).tolist() for k, v in feeds.items()},
        "host": host.name,
        "reference": name,
    }
    ctx.findings.append(finding)
    return {o: env0[o] for o in g.outputs}, f"ir-reference ({name})"


def _expected(g: Graph, site: Site, feeds, env0, ctx, base) -> tuple[dict, str]:
    """The whole model's expected outputs at `feeds` and who computed them: ONNX Runtime
    where it can run the model, else the IR reference (`env0`)."""
    if ctx.model is not None and not _uses_project_domain(ctx.model):
        return _against_ort(g, site, feeds, env0, ctx, base)
    return {o: env0[o] for o in g.outputs}, "ir-reference"


def _uses_project_domain(model) -> bool:
    return any(n.domain == PROJECT_DOMAIN for n in model.graph.node)


def whole_model(
    g: Graph, site: Site, verdict, columns, lift_col: int, ctx, apply
) -> WholeModelCounterexample:
    """Lift, replay on both forms, and check the difference reproduces exactly."""
    cx: Counterexample = verdict.counterexample
    acc = int(cx.assignment["acc"])
    j, row = find_row(site.compute, columns, acc, cx.lifted_input, lift_col)
    after = None if cx.undefined else int(cx.after)
    out = replay_row(
        g, site, j, row, dict(cx.assignment), int(cx.before), after, ctx, apply, cx.undefined
    )
    out.local = cx  # the prover's own record (with its lifted row), now reproduced
    return out


def replay_row(
    g: Graph,
    site: Site,
    j: int,
    row,
    assignment: dict[str, int],
    before: int,
    after: int | None,
    ctx,
    apply,
    undefined: str = "",
) -> WholeModelCounterexample:
    """Place `row` in the compute input, replay the original graph (under the chosen
    reference) and the fused form, and check column `j` of the site's output gives
    `before` / `after` exactly; then compare the original with ONNX Runtime."""
    node = site.compute
    reference = ctx.reference
    a_val = g.values[node.inputs[0]]
    nat = to_natural(node, np.zeros(a_val.shape, dtype=np.int8)).shape
    A = np.full(nat, node.attrs["a_zp"], dtype=np.int64)
    out_shape = g.values[node.output].shape
    nat_out = to_natural(node, np.zeros(out_shape, dtype=np.int8)).shape
    win = node.attrs.get("window")
    placed = (0,) * (len(nat_out) - 1) if win is None else _place_patch(node, A, row, j)
    if win is None:
        A[(0,) * (len(nat) - 1)] = np.asarray(row, dtype=np.int64)
    A = from_natural(node, A)
    # flat position, in the compute op's own output layout, of natural element (*placed, j)
    pos = from_natural(node, np.arange(int(np.prod(nat_out))).reshape(nat_out)).reshape(-1)
    at = 0 if placed is None else int(np.ravel_multi_index((*placed, j), nat_out))
    flat = int(np.nonzero(pos == at)[0][0])
    if placed is None:
        feeds, why = None, "every output element's patch of this convolution reads padding"
    else:
        feeds, why = _to_inputs(g, node.inputs[0], A.astype(np.dtype(a_val.dtype)))
    out_name = site.activation.output
    local = Counterexample(
        {k: int(v) for k, v in assignment.items()},
        int(before),
        None if after is None else int(after),
        None if after is None else abs(int(after) - int(before)),
        tuple(int(v) for v in row),
        undefined=undefined,
    )
    base = WholeModelCounterexample(local=local, element={"value": out_name, "column": j})
    if feeds is None:
        base.note = f"not liftable to whole-model inputs: {why}"
        return base
    env0 = run_graph(g, feeds, keep_all=True, reference=reference)
    trial = g.clone()
    apply(trial, site)
    shape = g.values[out_name].shape
    idx = tuple(int(v) for v in np.unravel_index(flat, shape))
    b = int(np.asarray(env0[out_name]).reshape(-1)[flat])
    if undefined:
        # The fused form has no value here (an NPU-side precondition fails): the
        # replay must refuse exactly as the simulator does.
        try:
            run_graph(trial, feeds, keep_all=True)
        except PreconditionViolation:
            pass
        else:
            raise InternalError(f"site {site.id}: fused form defined at an 'undefined' input")
        if b != int(before):
            raise InternalError(
                f"site {site.id}: counterexample does not reproduce on the whole model "
                f"(prover before {before}, replay {b} at {out_name}{list(idx)})"
            )
        expected, expected_by = _expected(g, site, feeds, env0, ctx, base)
        base.inputs, base.expected = feeds, expected
        base.element = {"value": out_name, "index": list(idx), "column": j}
        base.expected_by, base.actual_by = expected_by, "kernel"
        base.note = f"the fused form's result is undefined at this input: {undefined}"
        return base
    if after is None:
        raise InternalError(
            f"site {site.id}: a counterexample with no fused value is not undefined"
        )
    env1 = run_graph(trial, feeds, keep_all=True)
    a = int(np.asarray(env1[out_name]).reshape(-1)[flat])
    if (b, a) != (int(before), int(after)):
        raise InternalError(
            f"site {site.id}: counterexample does not reproduce on the whole model "
            f"(prover before/after {before}/{after}, replay {b}/{a} at {out_name}{list(idx)})"
        )
    expected, expected_by = _expected(g, site, feeds, env0, ctx, base)
    actual = {o: env1[o] for o in trial.outputs}
    base.inputs, base.expected, base.actual = feeds, expected, actual
    base.element = {"value": out_name, "index": list(idx), "column": j}
    base.expected_by, base.actual_by = expected_by, "kernel"
    if not any(
        not np.array_equal(np.asarray(expected[o]), np.asarray(actual[o]))
        for o in actual
        if o in expected
    ):
        base.note = "the difference is masked before the graph outputs"
    return base
