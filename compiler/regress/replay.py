"""Replay a counterexample directory written by `compiler.regress.emit_tests`.

`check_original`: the original graph still gives the recorded output under ONNX
Runtime. `check_compiled`: compiling the model again either leaves the refuted
site unfused (its verdict is no longer `proven`), or, if the site is fused, the
compiled program's output on the counterexample equals ONNX Runtime's output
within the policy. In both cases the compiled program must match ONNX Runtime
within the policy (the end-to-end promise).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class Case:
    """One counterexample directory, loaded."""

    dir: Path
    meta: dict[str, Any]
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    actual: dict[str, np.ndarray]


def load_case(d: str | Path) -> Case:
    """Read meta.json and counterexample.npz of a replay directory."""
    d = Path(d)
    meta = json.loads((d / "meta.json").read_text(encoding="utf-8"))
    with np.load(d / "counterexample.npz") as data:
        ins = {n: data[f"input_{i}"] for i, n in enumerate(meta["inputs"])}
        exp = {n: data[f"expected_{i}"] for i, n in enumerate(meta["outputs"])}
        act = {
            n: data[f"actual_{i}"]
            for i, n in enumerate(meta["outputs"])
            if f"actual_{i}" in data.files
        }
    return Case(d, meta, ins, exp, act)


def profile_of(d: dict[str, Any] | None) -> Any:
    """The `ReferenceProfile` recorded in meta.json (None: the default `onnx`)."""
    from prover.reference import ONNX, Accumulation, QdqReading, ReferenceProfile

    if d is None:
        return ONNX
    return ReferenceProfile(
        name=str(d["name"]),
        u8s8_accumulation=Accumulation(d["u8s8_accumulation"]),
        mlas_fma=bool(d["mlas_fma"]),
        summary=str(d.get("summary", "")),
        # records written before QDQ readings existed were lowered the float way
        qdq_reading=QdqReading(d.get("qdq_reading", QdqReading.FLOAT)),
    )


def diverges_here(reference: dict[str, Any] | None) -> bool:
    """Whether this host's ONNX Runtime computes otherwise than the recorded reference."""
    from compiler.ort.reference_host import host_profile, same_semantics

    return not same_semantics(host_profile(), profile_of(reference))


def _ir_outputs(case: Case, profile: Any) -> dict[str, np.ndarray]:
    from compiler.frontend.reader import to_ir
    from compiler.ir.semantics import run_graph

    g, _ = to_ir(str(case.dir / "model.onnx"), reference=profile)
    return run_graph(g, case.inputs, reference=profile)


def check_original(d: str | Path) -> None:
    """Assert ONNX Runtime still computes the recorded output of the original graph.

    Where this host's ONNX Runtime differs from the recorded reference profile (a
    `reference_divergence`, e.g. u8s8 pair saturation), ONNX Runtime must equal the IR
    under this host's profile and the recorded output the IR under the reference.
    """
    from compiler.ort.reference_host import host_profile
    from compiler.ort.tables import ort_outputs

    case = load_case(d)
    got = ort_outputs(case.dir / "model.onnx", case.inputs)
    ref = case.meta.get("reference")
    if diverges_here(ref):
        here, there = _ir_outputs(case, host_profile()), _ir_outputs(case, profile_of(ref))
        for name, exp in case.expected.items():
            np.testing.assert_array_equal(got[name], here[name], err_msg=f"ORT output {name!r}")
            np.testing.assert_array_equal(there[name], exp, err_msg=f"reference {name!r}")
        return
    for name, exp in case.expected.items():
        np.testing.assert_array_equal(got[name], exp, err_msg=f"ONNX Runtime output {name!r}")


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> int | float:
    """Largest |a-b| over all elements (integers compared exactly)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise AssertionError(f"shape {a.shape} != {b.shape}")
    if a.size == 0:
        return 0
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        return int(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64))))
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def compile_case(case: Case) -> tuple[Any, Any, Any]:
    """(compile result, target, policy) for the case's model; no proof store."""
    from compiler.api import compile_model
    from npu_backend.target import load_target
    from prover.policy import Policy

    policy = Policy.parse(case.meta["policy"])
    tf = case.meta.get("target_file")
    target = load_target(case.dir / tf if tf else None)
    result = compile_model(
        str(case.dir / "model.onnx"),
        policy=policy,
        target=target,
        reference=profile_of(case.meta.get("reference")),
    )
    return result, target, policy


def run_program(result: Any, target: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Generate the NPU program of a compile result (its fused tiles checked against the
    proven columns, as `npuc compile` does) and run it on the simulator."""
    from compiler.passes.tile_columns import check_program
    from npu_backend import codegen, simulator

    program = codegen.generate(result.lowered, target)
    check_program(result.sites, result.lowered, program)
    outputs, _counters = simulator.run(program, inputs)
    return {k: np.asarray(v) for k, v in outputs.items()}


def matching_site(result: Any, nodes: list[str]) -> Any:
    """The site of `result` over exactly these ONNX nodes, or None."""
    want = set(nodes)
    for s in result.sites:
        if set(s.nodes) == want:
            return s
    return None


def check_compiled(d: str | Path) -> None:
    """Assert the refuted rewrite is not applied again, or that it now matches."""
    case = load_case(d)
    result, target, policy = compile_case(case)
    site = matching_site(result, case.meta["nodes"])
    verdict = None if site is None else str(getattr(site.verdict, "value", site.verdict))
    outputs = run_program(result, target, case.inputs)
    expected = case.expected
    if diverges_here(case.meta.get("reference")):
        # host steps run this machine's ONNX Runtime: the program can only match its profile
        from compiler.ort.reference_host import host_profile

        here = _ir_outputs(case, host_profile())
        expected = {n: here[n] for n in case.expected}
    for name, exp in expected.items():
        diff = max_abs_diff(outputs[name], exp)
        assert diff <= policy.bound, (
            f"compiled program output {name!r} differs from ONNX Runtime by {diff} "
            f"(policy {policy}) on the recorded counterexample; site verdict now {verdict}"
        )
