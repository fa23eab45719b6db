"""`npuc compile --onnx-out FILE`: the compiled graph as an ONNX model, to look at in the
tools people use (Netron): what was fused, what runs where, on which proofs.

- each NPU step is one node of the project's domain (`DOMAIN`, op types `NpuMatMul`,
  `NpuLut`, `NpuRequant`, `NpuClip`, `NpuEltwise`, `NpuMove`, `NpuMaxPool`, `NpuConcat`), its weights as initializers; its attributes name the
  ONNX nodes it implements (`fused_ops`), whether it is fused, the activation, the
  scheduling structure, and the site it comes from with its verdict and the hashes of the
  proof obligations the fusion rests on (`proof_obligations`, the proof store's keys);
- host steps stay as they are: an ONNX Runtime subgraph's own nodes (its inner tensors
  and initializers prefixed with the step's name, so nothing clashes), an elementwise
  host kernel as the model's original node;
- the graph's inputs and outputs are the model's.

The file is for looking at, not for running: ONNX Runtime has no kernels for the
project's domain (the NPU program is `-o PROGRAM`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper as oh
from onnx import numpy_helper as nh

DOMAIN = "ai.npufusion"  # as compiler.frontend.f16_context.PROJECT_DOMAIN


def onnx_view(run: Any) -> onnx.ModelProto:
    """The compiled graph of a `compiler.cli.check_run.CheckRun` as an ONNX model."""
    from npu_backend.lowered import (
        HostKernel,
        HostOnnx,
        NpuClip,
        NpuConcat,
        NpuEltwise,
        NpuLut,
        NpuMatMul,
        NpuMaxPool,
        NpuMove,
        NpuRequant,
    )
    from npu_backend.postprocess import posts_of

    lowered = run.result.lowered
    original: onnx.ModelProto = run.result.context.model
    by_name = {n.name: n for n in original.graph.node}
    orig_inits = {t.name: t for t in original.graph.initializer}
    sites = _sites_by_node(run.result.sites)
    nodes: list[onnx.NodeProto] = []
    inits: dict[str, onnx.TensorProto] = {}
    opsets: dict[str, int] = {d.domain: d.version for d in original.opset_import}
    opsets[DOMAIN] = 1

    def const(name: str | None) -> str:
        if not name:
            return ""
        if name not in inits and name in lowered.constants:
            inits[name] = nh.from_array(np.asarray(lowered.constants[name]), name)
        return name

    for st in lowered.steps:
        if isinstance(st, NpuMatMul):
            w = st.w if st.w_input else const(st.w)  # a run-time operand, or a weight
            ins = [st.a, w, const(st.bias)]
            if st.a_zp_input:  # a run-time zero point (dynamic quantization)
                ins = [st.a, w, const(st.bias) or "", st.a_zp_input]
            attrs = {
                "a_zero_point": int(st.a_zp),
                "w_zero_point": [int(z) for z in np.atleast_1d(st.w_zp)],
                "a_type": st.a_type,
                "w_type": st.w_type,
                "structure": st.structure,
                "compute": st.compute,
            }
            posts = posts_of(st.post)
            fn = next((p.function for p in posts if p is not None and p.function), None)
            if fn:
                attrs["activation"] = fn
            nodes.append(_npu("NpuMatMul", st, ins, st.fused, attrs, sites))
        elif isinstance(st, NpuLut):
            attrs = {"table": list(st.table), "in_type": st.in_type, "out_type": st.out_type}
            if st.function:
                attrs["activation"] = st.function
            nodes.append(_npu("NpuLut", st, [st.x], False, attrs, sites))
        elif isinstance(st, NpuRequant):
            nodes.append(_npu("NpuRequant", st, [st.x], False, {}, sites))
        elif isinstance(st, NpuClip):
            attrs = {"lo": int(st.lo), "hi": int(st.hi), "dtype": st.dtype}
            nodes.append(_npu("NpuClip", st, [st.x], False, attrs, sites))
        elif isinstance(st, NpuEltwise):
            attrs = {"binary": st.record.binary, "dtype": st.record.dtype}
            if st.function:
                attrs["activation"] = st.function
            nodes.append(_npu("NpuEltwise", st, [st.a, st.b], st.lut is not None, attrs, sites))
        elif isinstance(st, NpuMove):
            attrs = {"shape": list(st.shape), "strides": list(st.strides), "offset": st.offset}
            nodes.append(_npu("NpuMove", st, [st.x], False, attrs, sites))
        elif isinstance(st, NpuMaxPool):
            attrs = {"kernel": list(st.window.kernel), "dtype": st.dtype}
            nodes.append(_npu("NpuMaxPool", st, [st.x], False, attrs, sites))
        elif isinstance(st, NpuConcat):
            attrs = {"axis": int(st.axis), "dtype": st.dtype}
            nodes.append(_npu("NpuConcat", st, list(st.xs), False, attrs, sites))
        elif isinstance(st, HostOnnx):
            _host_subgraph(st, nodes, inits, opsets)
        elif isinstance(st, HostKernel):
            node = by_name.get(st.onnx_nodes[0] if st.onnx_nodes else st.name)
            if node is not None and tuple(node.output) == (st.out,):
                host = onnx.NodeProto()
                host.CopyFrom(node)
                host.doc_string = "runs on the host (an elementwise integer kernel)"
                nodes.append(host)
                for t in node.input:
                    if t in orig_inits and t not in inits:
                        inits[t] = orig_inits[t]
            else:  # no single original node: the kernel as a node of the project's domain
                nodes.append(
                    oh.make_node(
                        "HostKernel",
                        list(st.inputs),
                        [st.out],
                        name=st.name,
                        domain=DOMAIN,
                        term=str(st.term),
                        out_dtype=st.out_dtype,
                        fused_ops=list(st.onnx_nodes) or [st.name],
                    )  # fmt: skip
                )
    outputs = {v.name: v for v in original.graph.output}
    graph = oh.make_graph(
        nodes,
        f"{original.graph.name or 'model'}_npu",
        [_value(t.name, t.dtype, t.shape) for t in lowered.inputs],
        [outputs[o] if o in outputs else _value(o, None, None) for o in lowered.outputs],
        list(inits.values()),
    )
    model = oh.make_model(
        graph,
        opset_imports=[oh.make_opsetid(d, v) for d, v in sorted(opsets.items())],
        producer_name="npuc",
        producer_version=run.report.tool_version,
        doc_string="The compiled graph (npuc compile --onnx-out): NPU steps are nodes of "
        f"domain {DOMAIN}; host steps are the model's own ops. For viewing (e.g. Netron).",
    )
    model.ir_version = original.ir_version or model.ir_version
    for k, v in (("target", run.report.target), ("policy", run.report.policy)):
        model.metadata_props.add(key=k, value=str(v))
    return model


def _sites_by_node(sites: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for s in sites:
        for n in s.nodes:
            out.setdefault(n, s)
    return out


def _npu(
    op: str, st: Any, ins: list[str], fused: bool, attrs: dict[str, Any], sites: dict[str, Any]
) -> onnx.NodeProto:
    covered = list(st.onnx_nodes) or [st.name]
    site = next((sites[n] for n in covered if n in sites), None)
    extra: dict[str, Any] = {"fused_ops": covered, "fused": int(fused), **attrs}
    if site is not None:
        extra["site"] = site.id
        extra["site_verdict"] = str(site.verdict.value if site.verdict else "none")
        if fused and site.obligations:
            extra["proof_obligations"] = [str(h) for h in site.obligations]
    while ins and ins[-1] == "":
        ins.pop()
    node = oh.make_node(op, ins, [st.out], name=st.name, domain=DOMAIN, **extra)
    node.doc_string = (
        f"NPU: {' + '.join(covered)} fused, proven" if fused else f"NPU: {', '.join(covered)}"
    )
    return node


def _host_subgraph(
    st: Any,
    nodes: list[onnx.NodeProto],
    inits: dict[str, onnx.TensorProto],
    opsets: dict[str, int],
) -> None:
    sub = onnx.load_model_from_string(st.model)
    keep = set(st.inputs) | set(st.outputs)

    def rename(t: str) -> str:
        return t if not t or t in keep else f"{st.name}/{t}"

    for t in sub.graph.initializer:
        c = onnx.TensorProto()
        c.CopyFrom(t)
        c.name = rename(t.name)
        inits.setdefault(c.name, c)
    named = list(st.onnx_nodes) if len(st.onnx_nodes) == len(sub.graph.node) else []
    for k, n in enumerate(sub.graph.node):
        c = onnx.NodeProto()
        c.CopyFrom(n)
        if not c.name:  # the model's node name (Netron shows it), else the step's
            c.name = named[k] if named else f"{st.name}/{k}"
        c.ClearField("input")
        c.ClearField("output")
        c.input.extend(rename(t) for t in n.input)
        c.output.extend(rename(t) for t in n.output)
        c.doc_string = "runs on the host (ONNX Runtime)"
        nodes.append(c)
    for d in sub.opset_import:
        opsets[d.domain] = max(opsets.get(d.domain, 0), d.version)


def _value(name: str, dtype: str | None, shape: Any) -> onnx.ValueInfoProto:
    elem = onnx.TensorProto.UNDEFINED
    if dtype is not None:
        elem = (
            onnx.TensorProto.STRING
            if dtype == "string"
            else oh.np_dtype_to_tensor_dtype(np.dtype(dtype))
        )
    return oh.make_tensor_value_info(name, elem, None if shape is None else list(shape))
