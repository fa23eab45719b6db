"""Cross-checks: every obligation the compiler builds is decided by two procedures, and every
refutation is replayed on ONNX Runtime (original graph) and the simulator (fused program).

The obligations are those the compiler asks for on every example model and a spread of
`tests/models.py` builders, on both shipped targets, under `bitwise` and `bounded:1`
(recorded through the proof-store hook, so the compiler's own path is what is tested).
"""

from __future__ import annotations

import time
from functools import cache

import numpy as np
import onnx
import pytest
import soundness_corpus as C

from prover.api import PROCEDURES
from prover.errors import NotApplicable
from prover.smtdecide import decide as smt_decide
from prover.solvers import Budget

POLICIES = ("bitwise", "bounded:1")


@cache
def _compiled_bitwise(name: str, target: str):
    """(result, obligations) of one bitwise compile per corpus model and target, shared by
    the collection (recorded, refutations) and the replay tests (read only)."""
    return C.compile_recording(C.corpus()[name], target)


@cache
def recorded() -> dict[str, tuple[str, str, object]]:
    """obligation hash -> (model name, target, obligation), first occurrence."""
    out: dict[str, tuple[str, str, object]] = {}
    for name, model in C.corpus().items():
        for target in C.targets():
            for policy in POLICIES:
                if policy == "bitwise":
                    _, obs = _compiled_bitwise(name, target)
                else:
                    _, obs = C.compile_recording(model, target, policy)
                for h, ob in obs.items():
                    out.setdefault(h, (name, target, ob))
    return out


def _decide(proc: str, ob):
    try:
        return PROCEDURES[proc](ob, Budget(60), time.perf_counter() + 60)
    except NotApplicable:
        return None


def test_corpus_yields_many_obligations_of_every_kind():
    obs = recorded()
    kinds = {ob.kind for _, _, ob in obs.values()}
    assert len(obs) >= 60 and {"epilogue", "index_map"} <= kinds
    statuses = {_decide("enumerate", ob).status for _, _, ob in obs.values()}
    assert statuses == {"holds", "violated"}, "the corpus must contain proofs and refutations"


@pytest.mark.parametrize("h", sorted(recorded()))
def test_segments_and_enumeration_agree(h):
    """Two exact procedures: same verdict, same largest difference, same simplest witness."""
    name, target, ob = recorded()[h]
    e = _decide("enumerate", ob)
    assert e is not None and e.decisive, f"{name} on {target}: enumeration cannot decide"
    other = _decide("segments", ob)
    if other is None:  # segments declines (not a monotone staircase): the SMT encoding instead
        other = smt_decide(ob, "bitwuzla", Budget(60), minimise=True)
    assert other.decisive, other.reason
    assert (other.status, other.max_diff) == (e.status, e.max_diff), (name, target, other, e)
    if e.status == "violated":
        assert other.minimal and e.minimal and other.witness == e.witness


@cache
def _smt_sample() -> list[str]:
    """Obligations decided again by Bitwuzla (query only): those of the example models, bitwise."""
    return sorted(
        h
        for h, (name, _, ob) in recorded().items()
        if name.startswith("examples/") and str(ob.policy) == "bitwise"
    )


def _smt_params() -> list:
    """One obligation per example model by default (the first by hash), the rest -m slow."""
    seen: set[str] = set()
    out = []
    for h in _smt_sample():
        name = recorded()[h][0]
        marks = [pytest.mark.slow] if name in seen else []
        seen.add(name)
        out.append(pytest.param(h, marks=marks, id=h[:16]))
    return out


@pytest.mark.parametrize("h", _smt_params())
def test_bitwuzla_agrees_on_the_example_obligations(h):
    name, target, ob = recorded()[h]
    e = _decide("enumerate", ob)
    b = smt_decide(ob, "bitwuzla", Budget(60), minimise=False)
    assert b.decisive, b.reason
    assert b.status == e.status, (name, target)


@pytest.mark.slow
@pytest.mark.parametrize("h", sorted(recorded()))
def test_bitwuzla_with_minimisation_agrees_everywhere(h):
    name, target, ob = recorded()[h]
    e = _decide("enumerate", ob)
    b = smt_decide(ob, "bitwuzla", Budget(120), minimise=True)
    assert (b.status, b.minimal) == (e.status, True) or b.status == e.status == "holds"
    if e.status == "violated":
        assert b.witness == e.witness


# --- replay of every refutation -------------------------------------------------------------


@cache
def refutations() -> list[tuple[str, str, str]]:
    """(model name, target, site id) of every refuted site in the corpus (bitwise)."""
    out = []
    for name in C.corpus():
        for target in C.targets():
            r, _ = _compiled_bitwise(name, target)
            out += [(name, target, s.id) for s in r.sites if s.verdict == "refuted"]
    return out


def _model_proto(model) -> onnx.ModelProto:
    return onnx.load(model) if isinstance(model, str) else model


def _ort_value(model: onnx.ModelProto, feeds: dict, value: str, ir_value) -> np.ndarray:
    """ONNX Runtime's value of tensor `value` in the original graph (exposed as an output)."""
    from compiler.ort.tables import session

    m = onnx.ModelProto()
    m.CopyFrom(model)
    if value not in {o.name for o in m.graph.output}:
        elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(ir_value.dtype))
        m.graph.output.append(onnx.helper.make_tensor_value_info(value, elem, ir_value.shape))
    names = [o.name for o in m.graph.output]
    out = session(m).run(None, feeds)
    return np.asarray(out[names.index(value)])


def _simulate_fused(model, target: str, feeds: dict, monkeypatch) -> dict[str, np.ndarray]:
    """Compile with every refuted site fused anyway, generate the program, run the simulator."""
    from compiler.passes import gate
    from npu_backend import codegen, simulator

    original = gate.decide_site

    def fuse_refuted(g, site, ctx):
        original(g, site, ctx)
        if site.verdict == "refuted":
            site.decide("proven")
            site.counterexample = None

    with monkeypatch.context() as mp:
        mp.setattr(gate, "decide_site", fuse_refuted)
        r, _ = C.compile_recording(model, target)
    program = codegen.generate(r.lowered, C.targets()[target])
    outs, _ = simulator.run(program, feeds)
    return {k: np.asarray(v) for k, v in outs.items()}, r


def test_corpus_has_refutations_to_replay():
    assert len(refutations()) >= 5


@pytest.mark.parametrize("name,target,site_id", refutations())
def test_refutation_replays_on_onnxruntime_and_simulator(name, target, site_id, monkeypatch):
    model = C.corpus()[name]
    r, _ = _compiled_bitwise(name, target)
    site = next(s for s in r.sites if s.id == site_id)
    cx = site.counterexample
    assert cx is not None and cx.inputs is not None, f"not lifted: {cx and cx.note}"
    assert cx.expected_by == "onnxruntime"
    value, j = cx.element["value"], cx.element["column"]
    proto = _model_proto(model)
    # Original graph on ONNX Runtime: the site's output element is the prover's `before`.
    ort_val = _ort_value(proto, cx.inputs, value, r.original.values[value])
    assert int(ort_val.reshape(-1)[j]) == cx.before
    # Fused program on the simulator: the graph outputs are what the kernel replay predicted,
    # and where the site's value is a graph output, its element is the prover's `after`.
    sim, fused = _simulate_fused(model, target, cx.inputs, monkeypatch)
    assert any(s.id == site_id and s.verdict == "proven" for s in fused.sites)
    ort_all = {o: np.asarray(cx.expected[o]) for o in cx.expected}
    for o, actual in cx.actual.items():
        assert sim[o].shape == ort_all[o].shape, o
        np.testing.assert_array_equal(sim[o], np.asarray(actual), err_msg=o)
    differing = [o for o in sim if not np.array_equal(sim[o], ort_all[o])]
    assert differing, "the replayed counterexample does not change any graph output"
    if value in sim:
        assert int(sim[value].reshape(-1)[j]) == cx.after
        diff = np.abs(sim[value].astype(np.int64) - ort_val.astype(np.int64))
        assert int(diff.reshape(-1)[j]) == abs(cx.before - cx.after) > 0


@pytest.mark.parametrize("name,target,site_id", refutations())
def test_reported_outputs_have_the_graph_output_shapes(name, target, site_id):
    r, _ = _compiled_bitwise(name, target)
    cx = next(s for s in r.sites if s.id == site_id).counterexample
    for o, exp in cx.expected.items():
        assert np.asarray(cx.actual[o]).shape == np.asarray(exp).shape, o
