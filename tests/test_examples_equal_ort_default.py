"""Every shipped example model: the compiled program equals ONNX Runtime's default session.

The end-to-end promise (docs/DESIGN.md) covers host steps too, so this compares whole
programs, NPU and host steps alike, with ORT's default session (the default reference,
`onnx`), on both shipped targets, on random, extreme and all-zero-point inputs. A model in
the project's own domain (`ai.npufusion`) cannot be loaded by ORT; its reference is the IR's
own evaluation, which the other suites compare. The digits models (a real network, slower to
compile: fixed-point synthesis) run under `-m slow` here and in `examples/digits/accuracy.py`;
the committed small zoo models (`examples/zoo/small`) run by default.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from compiler.api import compile_model
from npu_backend.codegen import generate
from npu_backend.input_ranges import index_ranges
from npu_backend.runner import run_batched
from npu_backend.target import load_target

ROOT = Path(__file__).resolve().parent.parent
TARGETS = tuple(
    str(ROOT / "npu_backend" / "targets" / f"{t}.toml") for t in ("npu_float", "npu_fixed")
)
NP = {
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(float)": np.float32,
    "tensor(int64)": np.int64,
}


def _runnable(path: Path) -> bool:
    return not any(o.domain == "ai.npufusion" for o in onnx.load(str(path)).opset_import)


EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.onnx") if _runnable(p))
DIGITS = sorted((ROOT / "examples" / "digits").glob("digits_*_q*.onnx"))
# the committed small zoo models (examples/zoo/small: built by examples/zoo/build.py --small)
ZOO = [
    pytest.param(
        p,
        id=p.stem,
        marks=[pytest.mark.slow] if k % 2 else [],  # every other one in the default run
    )
    for k, p in enumerate(sorted((ROOT / "examples" / "zoo" / "small").glob("*.onnx")))
]


def _inputs(
    sess: ort.InferenceSession, legal: dict[str, tuple[int, int]], rows: int = 8
) -> dict[str, np.ndarray]:
    """Random rows, then each type's extremes (of its legal range: token ids index a
    table), then all zeros."""
    rng = np.random.default_rng(0)
    feeds = {}
    for i in sess.get_inputs():
        dt = NP[i.type]
        shape = [rows if not isinstance(d, int) else d for d in i.shape]
        if dt is np.float32:
            a = rng.normal(size=shape).astype(dt) * 4
        else:
            info = np.iinfo(dt)
            lo, hi = legal.get(i.name, (int(info.min), int(info.max) + 1))
            a = rng.integers(lo, hi, size=shape).astype(dt)
            flat = a.reshape(-1)
            flat[: min(4, flat.size)] = [lo, hi - 1, 0, lo][: min(4, flat.size)]
        feeds[i.name] = a
    return feeds


def _check(path: Path, target: str) -> None:
    tgt = load_target(target)
    r = compile_model(path, "bitwise", tgt, proofs_mode="off")
    program = generate(r.lowered, tgt)
    so = ort.SessionOptions()
    so.log_severity_level = 4
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    feeds = _inputs(sess, index_ranges(r.lowered.steps, [i.name for i in sess.get_inputs()]))
    got, _ = run_batched(program, feeds)
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
    for name, w in want.items():
        g = np.asarray(got[name])
        assert g.shape == w.shape and g.dtype == w.dtype, name
        bad = int((g.view(np.uint8) != w.view(np.uint8)).sum()) if g.size else 0
        assert bad == 0, f"{path.name} on {target}: {name} differs from ORT in {bad} bytes"


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: Path(t).stem)
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_program_equals_ort_default_session(path: Path, target: str) -> None:
    _check(path, target)


@pytest.mark.parametrize(
    "target",
    [
        pytest.param(TARGETS[0], id="npu_float"),
        pytest.param(TARGETS[1], id="npu_fixed", marks=pytest.mark.slow),
    ],
)
@pytest.mark.parametrize("path", ZOO)
def test_small_zoo_program_equals_ort_default_session(path: Path, target: str) -> None:
    _check(path, target)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS, ids=lambda t: Path(t).stem)
@pytest.mark.parametrize("path", DIGITS, ids=lambda p: p.stem)
def test_digits_program_equals_ort_default_session(path: Path, target: str) -> None:
    _check(path, target)


def test_examples_are_found() -> None:
    """The parametrisation is not empty (a moved folder must fail, not skip)."""
    assert len(EXAMPLES) >= 6 and len(DIGITS) == 16 and len(ZOO) >= 20
