"""`npuc compile` / `npuc run` end to end in a subprocess; outputs checked against ONNX Runtime."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_helpers import EXAMPLES, assert_one_line_error, npuc

from compiler.ort.tables import ort_outputs

SHOWCASE = EXAMPLES / "showcase.onnx"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """The showcase compiled once: (directory, program path, report JSON)."""
    d = tmp_path_factory.mktemp("npuc")
    prog, report = d / "show.npuprog", d / "report.json"
    r = npuc("compile", SHOWCASE, "-o", prog, "--report", report, "--proofs-mode", "off")
    assert r.returncode == 0, r.stderr
    assert "1 of 4 candidate fusions applied" in r.stdout
    return d, prog, json.loads(report.read_text())


def random_inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "X": rng.integers(-128, 128, (1, 16)).astype(np.int8),
        "X4": rng.integers(-128, 128, (4, 16)).astype(np.int8),
    }


def test_report_lists_every_site_with_verdict_and_ledger(compiled):
    _, prog, rep = compiled
    assert rep["program"] == str(prog)
    verdicts = {tuple(s["nodes"]): s["verdict"] for s in rep["sites"]}
    assert verdicts == {
        ("mm_ok", "sig_ok"): "proven",
        ("mm_lut", "sig_lut"): "refuted",
        ("mm_shared", "sig_shared"): "rejected",
        ("mm_t", "transpose", "sig_t"): "rejected",
    }
    (fusion,) = rep["ledger"]["fusions"]
    assert fusion["onnx_nodes"] == ["mm_ok", "sig_ok"]
    assert fusion["bytes_not_written"] == fusion["expected_bytes"] == 8
    proven = [s for s in rep["sites"] if s["verdict"] == "proven"]
    assert proven[0]["ledger"]["site"] == fusion["site"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_run_equals_onnx_runtime_bitwise(compiled, seed):
    """Only proven rewrites are applied, so under bitwise the program equals ONNX Runtime."""
    d, prog, _ = compiled
    inputs = random_inputs(seed)
    np.savez(d / f"in{seed}.npz", **inputs)
    out = d / f"out{seed}.npz"
    r = npuc("run", prog, "--input", d / f"in{seed}.npz", "-o", out)
    assert r.returncode == 0, r.stderr
    want = ort_outputs(SHOWCASE, inputs)
    with np.load(out) as got:
        assert sorted(got.files) == sorted(want)
        for name, w in want.items():
            np.testing.assert_array_equal(got[name], w, err_msg=name)


def test_run_on_the_refuting_input_still_matches(compiled):
    """The counterexample input of the refuted site: the unfused program matches ORT."""
    d, prog, rep = compiled
    (site,) = [s for s in rep["sites"] if s["verdict"] == "refuted"]
    cex = site["counterexample"]
    inputs = {k: np.asarray(v["data"], dtype=v["dtype"]) for k, v in cex["inputs"].items()}
    np.savez(d / "cex.npz", **inputs)
    r = npuc("run", prog, "--input", d / "cex.npz", "-o", d / "cex_out.npz", "--counters",
             d / "counters.json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    with np.load(d / "cex_out.npz") as got:
        np.testing.assert_array_equal(got["Y_lut"], cex["expected"]["Y_lut"]["data"])
        assert not np.array_equal(got["Y_lut"], cex["actual"]["Y_lut"]["data"])
    assert json.loads((d / "counters.json").read_text())["instructions"] > 0


def test_run_bad_inputs_exit_2(compiled, tmp_path):
    _, prog, _ = compiled
    np.savez(tmp_path / "float.npz", X=np.zeros((1, 16), np.float32), X4=np.zeros((4, 16), np.int8))
    np.savez(tmp_path / "missing.npz", X=np.zeros((1, 16), np.int8))
    (tmp_path / "junk").write_text("not a program\n")
    out = tmp_path / "o.npz"
    assert_one_line_error(npuc("run", prog, "--input", tmp_path / "float.npz", "-o", out), "'X'")
    assert_one_line_error(
        npuc("run", prog, "--input", tmp_path / "missing.npz", "-o", out), "missing input 'X4'"
    )
    assert_one_line_error(
        npuc("run", tmp_path / "junk", "--input", tmp_path / "missing.npz", "-o", out),
        "not an NPU program file",
    )
    assert_one_line_error(
        npuc("run", prog, "--input", tmp_path / "junk", "-o", out), "not an .npz archive"
    )
    assert_one_line_error(
        npuc("run", tmp_path / "nope.prog", "--input", tmp_path / "junk", "-o", out),
        "program file not found",
    )
    assert not out.exists()


def test_compile_bad_inputs_exit_2(tmp_path):
    prog = tmp_path / "p.npuprog"
    assert_one_line_error(npuc("compile", tmp_path / "none.onnx", "-o", prog), "not found")
    (tmp_path / "x.onnx").write_text("junk")
    assert_one_line_error(npuc("compile", tmp_path / "x.onnx", "-o", prog), "not a valid ONNX")
    assert_one_line_error(
        npuc("compile", SHOWCASE, "-o", prog, "--policy", "fuzzy"), "bad policy 'fuzzy'"
    )
    assert_one_line_error(npuc("compile", SHOWCASE), "-o/--output")
    assert not prog.exists()


def test_version():
    r = npuc("--version")
    assert r.returncode == 0 and r.stdout.startswith("npuc ")
