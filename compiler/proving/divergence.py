"""u8s8 pair saturation against the NPU's exact matmul, per reference profile.

ONNX Runtime on x86 without VNNI sums uint8 x int8 products in int16-saturated pairs
(`prover.pair_saturation`); the NPU, the ONNX spec and the default `onnx` profile sum
exactly. Whether a pair can saturate is decided per column from the constant weights:
- under a pair-saturating reference, a site or lowering whose columns can saturate does
  not equal the reference: the site is refuted with an input row where the outputs
  differ (else it stays unknown), the bare matmul stays on the host;
- under any reference, such a matmul is a `reference_divergence` finding (with the row),
  because ORT on some CPU (maybe this one) computes something else there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from compiler.errors import InternalError
from compiler.ir.graph import Graph, Node
from compiler.ir.semantics import is_u8s8
from compiler.proving.cex import lift_spec
from prover.by_identity import ByIdentity
from prover.conv import any_pair_saturable
from prover.domain import NUMPY
from prover.pair_saturation import column_accs, divergent_row, reachable_columns, saturating_row
from prover.reference import Accumulation
from prover.terms import Var, evaluate
from prover.verdict import ReasonCode

MAX_COLUMNS_TRIED = 8  # per column group: the witness search is the costly part
REMEDY = (
    "quantize the weights with reduce_range=True (7-bit), or use int8 x int8 (s8s8) or "
    "uint8 x uint8 (u8u8) quantization"
)
# a QDQ matmul: ORT on x86 moves QDQ int8 activations to uint8, so s8s8 QDQ is no way out
QDQ_REMEDY = (
    "quantize the weights with reduce_range=True (7-bit), or use uint8 x uint8 (u8u8) "
    "quantization (ONNX Runtime on x86 moves QDQ int8 activations to uint8, so an s8s8 QDQ "
    "model runs this uint8 x int8 kernel too), or check against the ort-x86-avx2 reference"
)
# two run-time operands: no weights to narrow, only the types or the reference to choose
ACT_REMEDY = (
    "quantize both activations as uint8 (u8u8), or check against the ort-x86-avx2 reference, "
    "which models that kernel (--reference ort-x86-avx2)"
)
S8_QDQ_REMEDY = (
    "the model is int8 x int8 (s8s8) as written, but ONNX Runtime on x86 moves QDQ int8 "
    "activations to uint8 and runs its uint8 x int8 kernel; quantize the weights with "
    "reduce_range=True (7-bit), or check against the ort-x86-avx2 reference, which models "
    "that kernel (--reference ort-x86-avx2)"
)


def remedy(g: Graph, node: Node) -> str:
    """The advice for a saturable u8s8 matmul, by what the model writes: an s8s8 or u8s8
    QDQ group (`Graph.qdq_activation_types`), else a QOperator matmul."""
    written = {g.qdq_activation_types.get(o) for o in node.origin} - {None}
    if "int8" in written:
        return S8_QDQ_REMEDY
    return QDQ_REMEDY if written else REMEDY


def saturating_reference(reference: Any) -> bool:
    """Whether the profile sums u8s8 products in int16-saturated pairs."""
    acc = getattr(reference, "u8s8_accumulation", Accumulation.EXACT)
    return acc == Accumulation.PAIR_SATURATING_INT16


# saturable_columns' answers by the weights' identity: the findings, the gate and lowering
# ask about each u8s8 op (a fused node keeps its compute op's weights)
_SATURABLE: ByIdentity[tuple[int, ...]] = ByIdentity(1024)


def saturable_columns(node: Node) -> list[int]:
    """Columns of a u8s8 matmul where some uint8 input row saturates a pair."""
    if node.op not in ("matmul", "fused") or not is_u8s8(node):
        return []
    w, window = node.attrs["w"], node.attrs.get("window") is not None
    hit = _SATURABLE.get(w, window)
    if hit is None:
        # a conv's pair order (ORT's im2col/depthwise kernels) is not modelled: any pair of
        # two of its products that can saturate counts, in whatever order
        cols = any_pair_saturable(w) if window else reachable_columns(w)
        hit = _SATURABLE.put(w, tuple(int(j) for j in np.nonzero(cols)[0]), window)
    return list(hit)


def act_saturable(node: Node) -> bool:
    """A u8s8 matmul of two activations: every int8 value is reachable, so pairs saturate."""
    return node.op == "matmul_act" and is_u8s8(node)


CONV_PAIR_ORDER = (
    "ONNX Runtime's pair order for a uint8 x int8 convolution over a window (its im2col "
    "and depthwise kernels) is not modelled, so the saturating result is not known"
)


def _col_params(node: Node, j: int) -> tuple[np.ndarray, int, int, int]:
    """(weights, w_zp, a_zp, bias) of column `j`, as `cex.lift_spec` reads them."""
    s = lift_spec(node, j)
    return np.asarray(s.weights, dtype=np.int64), s.w_zp, s.x_zp, s.bias


def site_witness(site, bound: int) -> tuple[int, tuple[int, ...], int, int, int, int] | None:
    """(column, row, exact acc, saturating acc, before, after) where the site's original
    chain on the saturating accumulator and the fused NPU epilogue on the exact one differ
    by more than `bound`; None if no such row was found."""
    cols = saturable_columns(site.compute)
    for grp in site.post:
        in_group = set(grp.columns)
        tried = [c for c in cols if c in in_group][:MAX_COLUMNS_TRIED]
        if not tried:
            continue
        before, after = grp.before, grp.after(Var("acc"))
        for j in tried:
            w, w_zp, a_zp, bias = _col_params(site.compute, j)

            def differs(e: np.ndarray, s: np.ndarray, before=before, after=after) -> np.ndarray:
                b = evaluate(before, NUMPY, {"acc": np.asarray(s, dtype=np.int64)})
                f = evaluate(after, NUMPY, {"acc": np.asarray(e, dtype=np.int64)})
                return np.abs(np.asarray(b, np.int64) - np.asarray(f, np.int64)) > bound

            row = divergent_row(w, w_zp, a_zp, bias, differs)
            if row is None:
                continue
            e, s = column_accs(row, w, a_zp, w_zp, bias)
            b = int(evaluate(before, NUMPY, {"acc": np.array([s], dtype=np.int64)})[0])
            f = int(evaluate(after, NUMPY, {"acc": np.array([e], dtype=np.int64)})[0])
            return j, row, e, s, b, f
    return None


def lowering_block(node: Node, reference: Any) -> str | None:
    """Why a bare matmul may not run on the NPU under `reference` (None: it may)."""
    if not saturating_reference(reference):
        return None
    cols = saturable_columns(node)
    if not cols:
        return None
    if node.attrs.get("window") is not None:
        return (
            f"under reference {reference.name} two uint8 x int8 products can saturate int16 "
            f"in {len(cols)} column(s) (first {cols[0]}) of this convolution; "
            f"{CONV_PAIR_ORDER}; {REMEDY}"
        )
    return (
        f"under reference {reference.name} uint8 x int8 pairs saturate int16 in "
        f"{len(cols)} column(s) (first {cols[0]}), where the NPU accumulates exactly; "
        f"{REMEDY}"
    )


def findings(g: Graph, reference: Any, host: Any) -> list[dict[str, Any]]:
    """One `reference_divergence` finding per u8s8 matmul whose pairs can saturate.

    `host` is this machine's resolved profile (or None when unknown).
    """
    ref_sat = saturating_reference(reference)
    host_sat = None if host is None else saturating_reference(host)
    host_text = (
        "unknown on this host"
        if host_sat is None
        else (
            "this host's ONNX Runtime does too" if host_sat else "this host's ONNX Runtime does not"
        )
    )
    out = []
    for n in g.nodes:
        if act_saturable(n):
            f = _act_finding(g, n, reference, ref_sat, host_sat, host_text)
            out += [f] if f is not None else []
            continue
        if n.op != "matmul":
            continue
        cols = saturable_columns(n)
        if not cols:
            continue
        if n.attrs.get("window") is not None:
            out.append(_conv_finding(n, cols, reference, ref_sat, host_sat, host_text))
            continue
        j = cols[0]
        w, w_zp, a_zp, bias = _col_params(n, j)
        row = saturating_row(w)
        if row is None:
            raise InternalError(f"{n.name}: column {j} is saturable but has no saturating row")
        exact, sat = column_accs(row, w, a_zp, w_zp, bias)
        shown = str(list(row)) if len(row) <= 32 else "`input_row` in the JSON report"
        out.append(
            {
                "code": ReasonCode.REFERENCE_DIVERGENCE.value,
                "nodes": list(n.origin),
                "message": (
                    f"{', '.join(n.origin)}: ONNX Runtime on x86 CPUs without VNNI sums uint8 x "
                    f"int8 pairs with int16 saturation in {len(cols)} of "
                    f"{n.attrs['w'].shape[1]} column(s); on input row {shown}, column {j} "
                    f"accumulates {sat} there instead of {exact} ({host_text}; reference "
                    f"{reference.name} is {'saturating' if ref_sat else 'exact'}); {remedy(g, n)}"
                ),
                "column": j,
                "columns": cols,
                "input_row": list(row),
                "exact_acc": exact,
                "saturating_acc": sat,
                "host_saturates": host_sat,
                "reference_saturates": ref_sat,
            }
        )
    return out


def _act_finding(
    g: Graph, n: Node, reference: Any, ref_sat: bool, host_sat: bool | None, host_text: str
) -> dict[str, Any] | None:
    """The `reference_divergence` finding of a u8s8 QLinearMatMul of two activations: every
    int8 value of the second operand is reachable, so a row of 255s against a column of
    -128s saturates every pair (None when K < 2: no pair)."""
    k = int(g.values[n.inputs[0]].shape[-1])
    if k < 2:
        return None
    row, col = (255,) * k, np.full(k, -128, dtype=np.int64)
    a_zp, b_zp = int(n.attrs["a_zp"]), int(n.attrs["w_zp"])
    exact, sat = column_accs(row, col, a_zp, b_zp, 0)
    return {
        "code": ReasonCode.REFERENCE_DIVERGENCE.value,
        "nodes": list(n.origin),
        "message": (
            f"{', '.join(n.origin)}: ONNX Runtime on x86 CPUs without VNNI sums uint8 x int8 "
            f"pairs with int16 saturation, and both operands of this matmul are run-time "
            f"values; a row of 255s against a column of -128s accumulates {sat} there instead "
            f"of {exact} ({host_text}; reference {reference.name} is "
            f"{'saturating' if ref_sat else 'exact'}); {ACT_REMEDY}"
        ),
        "column": 0,
        "columns": [],
        "input_row": list(row),
        "exact_acc": exact,
        "saturating_acc": sat,
        "host_saturates": host_sat,
        "reference_saturates": ref_sat,
    }


def _conv_finding(
    n: Node, cols: list[int], reference: Any, ref_sat: bool, host_sat: bool | None, host_text: str
) -> dict[str, Any]:
    """The `reference_divergence` finding of a u8s8 conv over a window where two products can
    saturate int16: no input row is shown, ORT's pair order for convolutions being unknown."""
    return {
        "code": ReasonCode.REFERENCE_DIVERGENCE.value,
        "nodes": list(n.origin),
        "message": (
            f"{', '.join(n.origin)}: ONNX Runtime on x86 CPUs without VNNI may sum uint8 x int8 "
            f"pairs with int16 saturation; two products can saturate in {len(cols)} of "
            f"{n.attrs['w'].shape[1]} column(s) (first {cols[0]}) of this convolution, and "
            f"{CONV_PAIR_ORDER} ({host_text}; reference {reference.name} is "
            f"{'saturating' if ref_sat else 'exact'}); {REMEDY}"
        ),
        "column": cols[0],
        "columns": cols,
        "host_saturates": host_sat,
        "reference_saturates": ref_sat,
    }
