"""Input batches for the differential fuzzer: random, extreme and half-step.

Every batch is a full feed `{"x": array[M, K]}` of the model's input type (or, for a
float input, `{"x_in": float32[M, K]}` quantizing to those values), with a `kind`:
- `random`: uniform over the type;
- `extreme`: every element at the type's min or max, at the zero point, and per
  output column the rows reaching that column's largest and smallest accumulator;
- `half_step`: rows lifted (`prover.lift.lift_row`) to accumulators on both sides of
  the first requantization's rounding thresholds (where the float32 product crosses
  q + 1/2; exact ties are among them when the scale is a power of two);
- `exhaustive` (no compute op): all 256 input values, spread over the tensor;
- `quant_tie` (float input): values exactly half a step between two quantized values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prover.errors import LiftError
from prover.inttypes import int_type
from prover.lift import lift_row
from prover.matmul import accumulator_range
from prover.obligation import LiftSpec
from prover.requant import float_requant_thresholds, onnx_requant_scale

RANGE = {"int8": (-128, 127), "uint8": (0, 255)}


@dataclass
class Batch:
    """One feed of the model and how it was made."""

    kind: str
    feeds: dict[str, np.ndarray]


def _fill(rows: list[list[int]], M: int, K: int, fill: int, dtype: str) -> list[np.ndarray]:
    """Pack rows into [M, K] arrays (the last padded with `fill`)."""
    out = []
    for i in range(0, len(rows), M):
        chunk = rows[i : i + M]
        a = np.full((M, K), fill, dtype=np.int64)
        a[: len(chunk)] = np.asarray(chunk, dtype=np.int64)
        out.append(a.astype(dtype))
    return out


def _columns(spec: dict) -> tuple[np.ndarray, np.ndarray]:
    w = np.asarray(spec["w"], dtype=np.int64)
    wz = np.broadcast_to(np.asarray(spec["w_zp"], dtype=np.int64), (w.shape[1],))
    return w, wz


def _requant(spec: dict, j: int) -> tuple[float, int, str] | None:
    """(float32 scale, zp, out type) of the first requantization of column j, if any."""
    if spec["compute"] in ("qlinear", "qdq"):
        ws = spec["w_scale"]
        wsj = ws[j] if isinstance(ws, list) else ws
        s = float(onnx_requant_scale(spec["a_scale"], wsj, spec["y_scale"]))
        return s, spec["y_zp"], spec["y_type"]
    rq = spec.get("requantize")
    if rq is None:
        return None
    if rq["rounding"] == "float":
        s = rq["scale"]
    else:
        s = rq["multiplier"] * 2.0 ** rq["shift"] / 2.0**31
    return float(np.float32(s)), rq["zero_point"], rq["output_type"]


def _extreme_rows(spec: dict) -> list[list[int]]:
    at, K = spec["a_type"], spec["K"]
    lo, hi = RANGE[at]
    rows = [[lo] * K, [hi] * K, [spec["a_zp"]] * K, [lo, hi] * (K // 2) + [lo] * (K % 2)]
    if spec["compute"] == "none":
        return rows
    w, wz = _columns(spec)
    for j in range(w.shape[1]):
        c = w[:, j] - wz[j]
        rows.append([hi if v > 0 else lo for v in c])  # the column's largest accumulator
        rows.append([lo if v > 0 else hi for v in c])  # and its smallest
    return rows


def _half_step_rows(spec: dict, rng: np.random.Generator, limit: int) -> list[list[int]]:
    if spec["compute"] == "none":
        return []
    at = spec["a_type"]
    w, wz = _columns(spec)
    r = accumulator_range(w, wz, int_type(at), spec["a_zp"])
    rows: list[list[int]] = []
    cols = list(range(w.shape[1]))
    rng.shuffle(cols)
    per_col = max(2, limit // max(1, len(cols)))
    for j in cols:
        rq = _requant(spec, j)
        if rq is None:
            continue
        scale, zp, out = rq
        if not (np.isfinite(scale) and scale > 0):
            continue
        try:
            t = np.asarray(float_requant_thresholds(scale, zp, out), dtype=np.int64)
        except Exception:  # noqa: BLE001 - a scale the kernel refuses: no thresholds to aim at
            continue
        t = t[(t > r.lo[j]) & (t <= r.hi[j])]
        if t.size == 0:
            continue
        pick = rng.choice(t, size=min(per_col // 2 + 1, t.size), replace=False)
        spec_j = LiftSpec("acc", tuple(int(v) for v in w[:, j]), int(wz[j]), spec["a_zp"], at, 0)
        for acc in sorted({int(v) for p in pick for v in (p - 1, p)}):
            try:
                rows.append(list(lift_row(spec_j, acc, timeout_s=0.2)))
            except LiftError:
                continue
        if len(rows) >= limit:
            break
    return rows[:limit]


def batches(spec: dict, rng: np.random.Generator, n_random: int = 2) -> list[Batch]:
    """The input batches of one model (deterministic for `rng`)."""
    at, M, K = spec["a_type"], spec["M"], spec["K"]
    lo, hi = RANGE[at]
    out = [
        Batch("random", {"x": rng.integers(lo, hi + 1, size=(M, K)).astype(at)})
        for _ in range(n_random)
    ]
    if spec["compute"] == "none":
        vals = list(range(lo, hi + 1))
        flat = np.resize(np.asarray(vals), max(M * K, 256))
        rows = flat.reshape(-1, K).tolist() if flat.size % K == 0 else None
        if rows is None:
            flat = np.resize(np.asarray(vals), ((256 + K - 1) // K) * K)
            rows = flat.reshape(-1, K).tolist()
        out += [Batch("exhaustive", {"x": a}) for a in _fill(rows, M, K, spec["a_zp"], at)]
    out += [Batch("extreme", {"x": a}) for a in _fill(_extreme_rows(spec), M, K, spec["a_zp"], at)]
    limit = max(12, 6 * M)
    half = _half_step_rows(spec, rng, limit)
    out += [Batch("half_step", {"x": a}) for a in _fill(half, M, K, spec["a_zp"], at)]
    if spec.get("float_input") is not None:
        out = _to_float(spec, rng, out)
    return out


def _to_float(spec: dict, rng: np.random.Generator, batches: list[Batch]) -> list[Batch]:
    """Float inputs that the model's QuantizeLinear maps to the integer batches (random ones
    jittered within a step), plus one batch exactly on the quantizer's half steps."""
    s, zp = np.float32(spec["a_scale"]), spec["a_zp"]
    out = []
    for b in batches:
        q = b.feeds["x"].astype(np.float64) - zp
        jitter = rng.uniform(-0.45, 0.45, q.shape) if b.kind == "random" else 0.0
        out.append(Batch(b.kind, {"x_in": ((q + jitter) * s).astype(np.float32)}))
    q = batches[0].feeds["x"].astype(np.float64) - zp
    out.append(Batch("quant_tie", {"x_in": ((q + 0.5) * s).astype(np.float32)}))
    return out
