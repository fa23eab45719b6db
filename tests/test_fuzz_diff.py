"""The differential fuzzer (bench/fuzz_diff.py): a seeded sample in the default suite.

Real models, the real compiler, codegen and simulator, ONNX Runtime as the reference;
no mocks except in the negative control, which corrupts the simulator's NPU results to
show the comparison can fail.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from sim_helpers import corrupt_npu_results

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import fuzz_diff as D  # noqa: E402
import fuzz_gen as G  # noqa: E402

SEED = 1  # its 24-model sample has every verdict, every compute form and both targets
SAMPLE = 24

# Feature tags the default-suite sample skips while another area's fix is in progress,
# tag -> the open finding (see bench/README.md). Empty since the float16 QDQ tables and
# the QLinearMatMul types ORT cannot run were fixed (issue 10); add a tag here, with its
# reason, rather than weaken an assertion. The full run never skips anything.
KNOWN_IN_PROGRESS: dict[str, str] = {}


def _skip(tags: set[str]) -> bool:
    return bool(tags & set(KNOWN_IN_PROGRESS))


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    t0 = time.perf_counter()
    s = D.run(SAMPLE, SEED, out_dir=tmp_path_factory.mktemp("fuzz"), exclude=_skip)
    return s, time.perf_counter() - t0


def test_sample_has_no_false_proof_and_no_crash(sample):
    s, _ = sample
    fails = s.failures()
    assert not fails, D.render(s)


def test_sample_exercises_every_verdict_and_both_targets(sample):
    """A sample that proves nothing or never runs the NPU would pass vacuously."""
    s, seconds = sample
    checked = [r for r in s.results if r.status == "checked"]
    assert len(checked) >= SAMPLE - 3
    verdicts = sum((r.verdicts for r in checked), start=D.Counter())
    assert verdicts["proven"] >= 2 and verdicts["rejected"] >= 3
    assert verdicts["refuted"] + verdicts["unknown"] >= 1
    tags = set().union(*(r.tags for r in checked))
    assert {"target:npu_float", "target:npu_fixed", "policy:bitwise"} <= tags
    assert {"compute:qlinear", "compute:integer", "compute:qdq", "compute:none"} <= tags
    assert seconds < 60, f"sample took {seconds:.0f} s"


def test_corrupted_npu_results_are_caught(monkeypatch, tmp_path):
    """Negative control: every NPU instruction's result off by one must be a failure."""
    corrupt_npu_results(monkeypatch)
    s = D.run(6, SEED, out_dir=tmp_path, exclude=_skip)
    cats = {f.category for _, f in s.failures()}
    assert cats & {"false_proof", "npu_mismatch"}, D.render(s)
    repro = [Path(p) for r in s.results for p in r.reproducers]
    assert repro and all((p / "model.onnx").is_file() for p in repro)
    assert any((p / "inputs.npz").is_file() for p in repro)


def test_same_seed_same_models_and_verdicts():
    a, _ = D.check_model(3, SEED)
    b, _ = D.check_model(3, SEED)
    assert a.spec == b.spec and a.verdicts == b.verdicts
    assert [f.category for f in a.findings] == [f.category for f in b.findings]
    assert G.build(a.spec).SerializeToString() == G.build(b.spec).SerializeToString()
    c, _ = D.check_model(3, SEED + 1)
    assert c.spec != a.spec


def test_half_step_inputs_hit_rounding_thresholds():
    """Half-step rows put the first requantization exactly at or next to a threshold."""
    import fuzz_inputs as I

    from prover.requant import float_requant_thresholds

    for index in range(40):
        rng = np.random.default_rng([SEED, index])
        spec = G.random_spec(rng)
        if spec["compute"] != "qlinear" or spec["per_column"]:
            continue
        rows = I._half_step_rows(spec, np.random.default_rng(0), 8)
        if not rows:
            continue
        scale, zp, out = I._requant(spec, 0)
        t = set(float_requant_thresholds(scale, zp, out))
        w, wz = I._columns(spec)
        acc = (np.asarray(rows, np.int64) - spec["a_zp"]) @ (w - wz)
        near = [any(int(a) in t or int(a) + 1 in t for a in acc[:, j]) for j in range(w.shape[1])]
        assert any(near), spec["opset"]
        return
    pytest.fail("no per-tensor QLinearMatMul model with half-step rows in the first 40")


@pytest.mark.slow  # the default run keeps a fast sample of this group (README: test time)
def test_command_line_prints_the_table(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "bench.fuzz_diff", "--models", "2", "--seed", "5"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode in (0, 1), p.stderr
    assert "category" in p.stdout and "false_proof" in p.stdout and "Traceback" not in p.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "bench.fuzz_diff", "--models", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def _example_checker(target: str, rounded: bool = False) -> D.Checker:
    import onnx

    model = onnx.load(str(REPO / "examples" / "matmul_sigmoid.onnx"))
    spec = {"policy": "bitwise", "target": target, "compute": "qlinear", "a_zp": 0}
    spec.update(a_type="int8", w_type="int8")
    c = D.Checker(spec, model, timeout_s=10.0)
    if rounded:  # the target's rounded parameters only (no synthesis space)
        caps = [dataclasses.replace(k, synthesis=frozenset()) for k in c.target.computes]
        c.target = dataclasses.replace(c.target, computes=tuple(caps))
    c.compile()
    return c


def test_refutation_replays_and_a_forged_one_does_not():
    """The shipped example is refuted on npu_fixed with rounded parameters (a rounding tie;
    synthesis would prove it): its counterexample replays on ORT; the same counterexample
    with a wrong `before` must be reported."""
    c = _example_checker("npu_fixed", rounded=True)
    refuted = [s for s in c.result.sites if s.verdict == "refuted"]
    assert refuted and refuted[0].counterexample.inputs is not None
    found, feeds = c.refutations()
    assert feeds and not [f for f in found if f.failure]
    for _, f in feeds:
        assert not [g for g in c.compare(f, "counterexample") if g.failure]
    cx = refuted[0].counterexample  # forge: the prover's record says another `before`
    cx.local = dataclasses.replace(cx.local, before=cx.local.before + 1)
    found, _ = c.refutations()
    assert [f.category for f in found] == ["refutation_not_reproduced"]
