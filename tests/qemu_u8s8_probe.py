"""Run under `qemu-x86_64 -cpu Haswell` (AVX2, no VNNI): ORT's u8s8 kernels vs the profiles.

Prints one JSON line: for QLinearMatMul and MatMulInteger with random uint8 x int8
operands (extremes sprinkled, zero points non-zero and zero, one row and many), the
outputs compared, and how many differ from the exact and the pair-saturating model;
also what `compiler.ort.reference_host` resolves `ort-host` to, and a `prover check
--reference ort-host` of a saturable model (verdict and whether it replayed).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import ort_models as M
import u8s8_models as U

from compiler.api import compile_model
from compiler.ort.reference_host import host_profile
from prover.inttypes import UINT8
from prover.matmul import matmul_acc
from prover.pair_saturation import pair_saturating_acc
from prover.requant import onnx_requant_scale, requant_float_concrete


def _rand(rng, dtype, shape):
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, shape)
    ext = rng.random(shape) < 0.3
    x[ext] = rng.choice([info.min, info.max], size=int(ext.sum()))
    return x.astype(dtype)


def main() -> None:
    rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    counts = {
        k: {"outputs": 0, "exact_mismatch": 0, "pair_mismatch": 0}
        for k in ("QLinearMatMul", "MatMulInteger")
    }
    for m, k, n, a_zp in ((1, 64, 8, 0), (4, 33, 8, 7), (8, 96, 8, 128), (1, 17, 8, 0)):
        a = _rand(rng, "uint8", (m, k))
        b = _rand(rng, "int8", (k, n))
        exact, pair = matmul_acc(a, b, a_zp, 0), pair_saturating_acc(a, b, a_zp, 0)
        got = M.matmul_integer("uint8", b, a_zp, 0, m).run(None, {"a": a})[0].astype(np.int64)
        c = counts["MatMulInteger"]
        c["outputs"] += got.size
        c["exact_mismatch"] += int((got != exact).sum())
        c["pair_mismatch"] += int((got != pair).sum())
        a_s, b_s = np.float32(0.02), np.float32(0.01)
        y_s = np.float32(float(np.abs(exact).max() + 1) * 0.02 * 0.01 / 128)
        sess = M.qlinear_matmul("uint8", b, a_s, a_zp, b_s, 0, y_s, 128, "uint8", m)
        got = sess.run(None, {"a": a})[0].astype(np.int64)
        s = onnx_requant_scale(a_s, b_s, y_s)
        c = counts["QLinearMatMul"]
        c["outputs"] += got.size
        c["exact_mismatch"] += int((got != requant_float_concrete(exact, s, 128, UINT8)).sum())
        c["pair_mismatch"] += int((got != requant_float_concrete(pair, s, 128, UINT8)).sum())
    r = compile_model(U.qlinear_matmul_sigmoid(U.saturable_weights()), reference="ort-host")
    site = r.sites[0]
    out = {
        "host": host_profile().name,
        "counts": counts,
        "ort_host_check": {
            "verdict": site.verdict,
            "expected_by": site.counterexample.expected_by if site.counterexample else None,
            "note": site.counterexample.note if site.counterexample else None,
        },
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
