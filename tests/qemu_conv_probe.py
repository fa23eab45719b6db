"""Run under `qemu-x86_64 -cpu Haswell` (AVX2, no VNNI): ORT's QLinearConv vs exact accumulation.

Prints one JSON line: per conv form (s8s8, u8u8, u8s8 with full-range and 7-bit weights;
3x3, depthwise, grouped, pointwise, zero points at the extremes), the outputs compared and
how many of ORT's (optimisations off and default session) differ from the exact meaning
(`prover.conv`); then, compiled under `ort-host`, whether each model's program (simulated)
equals ORT's default session and whether its conv is on the NPU; and a refuted u8s8 conv
site replayed under the exact `onnx` reference (who gave the expected output).
"""

from __future__ import annotations

import json
from pathlib import Path

from conv_models import conv_inputs, qconv
from models import conv_activation
from onnx import compose
from onnx import helper as oh

from compiler.api import compile_model
from compiler.frontend.reader import to_ir
from compiler.ir.semantics import run_graph
from compiler.ort.reference_host import host_profile
from compiler.ort.tables import session
from npu_backend import codegen, simulator
from npu_backend.lowered import NpuMatMul
from npu_backend.target import load_target
from prover.reference import ONNX

CASES = {
    "s8s8_3x3": dict(pads=(1, 1, 1, 1)),
    "s8s8_3x3_bias_pc": dict(pads=(1, 1, 1, 1), per_channel=True, bias=True),
    "s8s8_depthwise": dict(C_in=6, C_out=6, group=6, pads=(1, 1, 1, 1)),
    "s8s8_grouped": dict(C_in=4, C_out=6, group=2, pads=(0, 1, 0, 1)),
    "s8s8_x_zp_min": dict(pads=(1, 1, 1, 1), x_zp=-128),
    "u8u8_3x3": dict(x_type="uint8", w_type="uint8", pads=(1, 1, 1, 1), w_zp=128),
    "u8s8_3x3_7bit": dict(x_type="uint8", pads=(1, 1, 1, 1), w_range=(-64, 63)),
    "u8s8_3x3": dict(x_type="uint8", pads=(1, 1, 1, 1)),
}


def main() -> None:
    prof = host_profile()
    out: dict = {"host": prof.name, "counts": {}, "compiled": {}}
    for name, kw in CASES.items():
        m = qconv(y_scale=2.0, **kw)  # a wide output scale: accumulator differences show
        g, _ = to_ir(m)
        c = {"outputs": 0, "default": 0, "off": 0}
        for seed in range(4):
            inp = conv_inputs(m, seed, extremes=seed % 2 == 1)
            exact = run_graph(g, inp)["y"]
            c["outputs"] += exact.size
            c["default"] += int((session(m, level="default").run(None, inp)[0] != exact).sum())
            c["off"] += int((session(m).run(None, inp)[0] != exact).sum())
        out["counts"][name] = c
        r = compile_model(m, "bitwise", reference=prof)
        prog = codegen.generate(r.lowered, r.context.config.target)
        equal = True
        for seed in range(2):
            inp = conv_inputs(m, seed, extremes=seed == 1)
            ref = session(m, level="default").run(None, inp)[0]
            equal &= bool((simulator.run(prog, inp)[0]["y"] == ref).all())
        on_npu = any(isinstance(s, NpuMatMul) for s in r.lowered.steps)
        out["compiled"][name] = {"equal": equal, "on_npu": on_npu}
    # a refuted site (pointwise int8 conv -> sigmoid on npu_fixed) replayed under the exact
    # reference in a model that also holds a u8s8 conv this CPU's ORT saturates: the IR has
    # no meaning under the host's profile there, ORT's own outputs are compared instead
    a = conv_activation(per_channel=True, bias=True, C_out=6)
    b = compose.add_prefix(qconv(x_type="uint8", pads=(1, 1, 1, 1)), "u8_")
    for part in (a, b):
        part.ir_version = 8
        del part.opset_import[:]
        part.opset_import.extend([oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)])
    m = compose.merge_models(a, b, io_map=[])
    fixed = load_target(Path(__file__).parent.parent / "npu_backend/targets/npu_fixed.toml")
    (site,) = compile_model(m, "bitwise", fixed, reference=ONNX).sites
    cx = site.counterexample
    out["refuted_replay"] = {
        "verdict": str(site.verdict),
        "expected_by": None if cx is None else cx.expected_by,
        "note": None if cx is None else cx.note,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
