"""CPU burnt while idle with many ONNX Runtime sessions alive: the compiler's vs ORT's default.

A check keeps dozens of small sessions (constant folding of shape ops, host output types,
the region check). With ORT's default session options their idle pool workers may spin;
the compiler's session factory (`compiler.ort.tables.session`) lets them block. This
creates N sessions of distinct one-node models each way, runs each once, then sleeps and
prints the process CPU per idle second, and the ratio, measured in one run:

    python3 bench/idle_sessions.py            # 32 sessions, 1 s idle
    python3 bench/idle_sessions.py --sessions 64 --idle 2
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh


def _model(k: int) -> bytes:
    """A one-node model adding the constant k (its own bytes, so its own session)."""
    c = onnx.numpy_helper.from_array(np.asarray([k], dtype=np.float32), "c")
    g = oh.make_graph(
        [oh.make_node("Add", ["x", "c"], ["y"])],
        "g",
        [oh.make_tensor_value_info("x", TP.FLOAT, [4])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [4])],
        [c],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def idle_cpu(make, n: int, idle: float) -> float:
    """Process CPU seconds per idle second with `n` sessions from `make` alive."""
    x = np.zeros(4, np.float32)
    alive = [make(_model(k)) for k in range(n)]
    for s in alive:
        s.run(None, {"x": x})
    c0 = time.process_time()
    time.sleep(idle)
    spent = time.process_time() - c0
    del alive
    return spent / idle


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=32)
    ap.add_argument("--idle", type=float, default=1.0, help="seconds idle per measurement")
    args = ap.parse_args()
    import onnxruntime as ort

    from compiler.ort import tables

    def ort_default(blob: bytes):
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])

    base = idle_cpu(ort_default, args.sessions, args.idle)
    ours = idle_cpu(tables.session, args.sessions, args.idle)
    tables._session.cache_clear()
    print(f"{args.sessions} sessions alive, CPU per idle second:")
    print(f"  ORT default options (intra-op pool spins): {base:.3f} s")
    print(f"  compiler.ort.tables.session (blocks):      {ours:.3f} s")
    print(f"  saved per idle second: {base - ours:.3f} s of CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
