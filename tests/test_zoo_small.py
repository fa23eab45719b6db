"""The committed small zoo (examples/zoo/small/, written by `build.py --small`): real models
exported from torch and quantized by ONNX Runtime, used here without torch.

What holds: the manifest lists exactly the committed files and they stay small; ONNX
Runtime runs every one; `build.py --list` needs no torch; the survey's MAC counts are
the hand-computed ones; and the tools end every small zoo model with a verdict or a
one-line error, never an internal error or a traceback.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.cli_helpers import prover

ZOO = Path(__file__).resolve().parent.parent / "examples" / "zoo"
SMALL = ZOO / "small"
sys.path.insert(0, str(ZOO))

import macs  # noqa: E402
import variants  # noqa: E402

MODELS = tomllib.loads((SMALL / "manifest.toml").read_text())["model"]


def test_manifest_lists_exactly_the_committed_small_files():
    files = sorted(p.name for p in SMALL.glob("*.onnx"))
    assert sorted(m["file"] for m in MODELS) == files
    for m in MODELS:
        assert m["file"] == variants.file_name(m["arch"], variants.parse(m["variant"]))
        assert m["family"] in {"cnn", "rnn", "mlp", "bert", "vit", "gpt2"}
    sizes = [(SMALL / f).stat().st_size for f in files]
    assert max(sizes) < 200_000 and sum(sizes) < 2_000_000
    # the quant_pre_process flow and every format are represented
    kinds = {variants.parse(m["variant"]).format for m in MODELS}
    assert kinds == {"qop", "qdq", "dyn"}
    assert any(variants.parse(m["variant"]).pre for m in MODELS)


@pytest.mark.parametrize("name", [m["file"] for m in MODELS])
def test_onnx_runtime_runs_every_small_zoo_model(name):
    s = ort.InferenceSession(str(SMALL / name), providers=["CPUExecutionProvider"])
    (out,) = s.run(None, macs.valid_feeds(s))
    assert np.isfinite(out).all()


def test_variant_names_round_trip_and_bad_names_are_refused():
    for v in variants.STATIC + variants.DYNAMIC:
        assert variants.parse(v.name) == v
    for bad in ("qop_u8s8", "qdq_u8s8_px", "foo_u8s8_pt", "qop_u9s8_pt", "qop_u8s8_pt_post"):
        with pytest.raises(ValueError, match="not a variant name"):
            variants.parse(bad)


def test_build_list_needs_no_torch_and_unknown_names_exit_2(monkeypatch, capsys):
    import build

    for mod in ("torch", "torchvision", "transformers"):
        monkeypatch.setitem(sys.modules, mod, None)  # any import of them now fails
    assert build.main(["--list", "--small"]) == 0
    out = capsys.readouterr().out
    for arch in ("mlp", "tiny_cnn", "tiny_lstm", "tiny_bert"):
        assert arch in out
    assert build.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "resnet18" in out and "gpt2" in out and "tiny_cnn" not in out
    assert build.main(["--only", "alexnet"]) == 2
    assert capsys.readouterr().err.strip() == "error: unknown architecture(s): alexnet (see --list)"
    # building needs the extra: a one-line error naming it, not an ImportError
    with pytest.raises(SystemExit, match=r"pip install -e '\.\[zoo\]'"):
        build.main(["--only", "mlp", "--out", "/nonexistent"])


def test_macs_are_counted_from_run_time_shapes():
    cnn = onnx.load(str(SMALL / "tiny_cnn__qop_u8s8_pt.onnx"))
    total, by_op = macs.model_macs(cnn)
    # 16x16: stem 3x3 3->8, depthwise 3x3, 1x1 8->8, 3x3 stride 2 8->16 (8x8 out), Linear 16->10
    conv = 256 * 8 * 27 + 256 * 8 * 9 + 256 * 8 * 8 + 64 * 16 * 72
    assert by_op == {"QLinearConv": conv, "QGemm": 160} and total == conv + 160
    qdq = macs.model_macs(onnx.load(str(SMALL / "tiny_cnn__qdq_u8s8_pc.onnx")))[1]
    assert qdq == {"Conv": conv, "Gemm": 160}
    # LSTM(8, 16) over 4 steps: 4 gates x 16 x (8 + 16) per step, behind Shape/Expand ops
    lstm = macs.model_macs(onnx.load(str(SMALL / "tiny_lstm__dyn_u8s8_pt.onnx")))[1]
    assert lstm == {"DynamicQuantizeLSTM": 4 * 64 * 24, "MatMulInteger": 16 * 4}


SAMPLE = ["tiny_cnn__qdq_u8s8_pc.onnx", "tiny_lstm__dyn_u8s8_pt.onnx"]


def _check_ends_cleanly(name: str) -> None:
    r = prover("check", str(SMALL / name), "--policy", "bitwise", "--proofs-mode", "off")
    assert r.returncode in (0, 1, 2, 3), (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    if r.returncode == 2:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert lines and lines[-1].startswith("prover: error:"), r.stderr


@pytest.mark.parametrize("name", SAMPLE)
def test_prover_check_ends_small_zoo_models_with_a_verdict_or_one_line_error(name):
    _check_ends_cleanly(name)


def test_mlp_sigmoid_and_tanh_sites_are_proven():
    r = prover(
        "check", str(SMALL / "mlp__qop_u8s8_pt.onnx"), "--policy", "bitwise", "--proofs-mode", "off"
    )
    assert r.returncode == 0, r.stderr
    assert "PROVEN" in r.stdout and "REFUTED" not in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", [m["file"] for m in MODELS if m["file"] not in SAMPLE + ["mlp__qop_u8s8_pt.onnx"]]
)
def test_prover_check_ends_every_small_zoo_model_cleanly(name):
    _check_ends_cleanly(name)


def test_survey_reads_the_tool_error_behind_ort_log_lines_and_folds_names():
    import survey

    stderr = (
        "\x1b[0;93m2026-12-01 21:49:13.917996291 [W:onnxruntime:, graph.cc:5809 "
        "CleanUnusedInitializersAndNodeArgs] Removing initializer 'c'.\x1b[m\n"
        "\n"
        "prover: error: node '/rnn/Expand' (Expand): cannot infer the type and shape of 'y'\n"
        "second line\n"
    )
    line, logs = survey._first_error(stderr)
    assert logs == 1
    assert (
        line == "prover: error: node '/rnn/Expand' (Expand): cannot infer the type and shape of 'y'"
    )
    other = "prover: error: node '/gru/Expand_3' (Expand): cannot infer the type and shape of 'z'"
    assert survey.fold(line) == survey.fold(other)
    assert survey.fold("acc 12 of 3.5") == "acc N of N"


@pytest.mark.slow
def test_survey_measures_small_zoo_models(tmp_path):
    import shutil

    import survey

    for name in ("mlp__qop_u8s8_pt.onnx", "tiny_lstm__dyn_u8s8_pt.onnx"):
        shutil.copy(SMALL / name, tmp_path / name)  # no manifest: every *.onnx, arch from the name
    out = tmp_path / "s.json"
    assert survey.main([str(tmp_path), "--jobs", "1", "--json", str(out)]) == 0
    by = {r.file: r for r in survey._load(out)}
    mlp, lstm = by["mlp__qop_u8s8_pt.onnx"], by["tiny_lstm__dyn_u8s8_pt.onnx"]
    assert mlp.ort == lstm.ort == "ok"
    assert mlp.check.rc == 0 and mlp.check.summary["proven"] >= 2 and mlp.compile.rc == 0
    assert mlp.macs == 18752 and mlp.npu_macs + mlp.host_macs == mlp.macs and mlp.npu_share == 1.0
    assert lstm.macs == 6208 and lstm.check.rc in (0, 2) and lstm.check.cpu_s > 0


def test_make_zoo_is_build_under_the_issues_name_and_lists_the_four_ways(monkeypatch, capsys):
    """`examples/zoo/make_zoo.py --list` (no torch) lists the CNNs of the convolution issue
    in its four ways, and the transformers and RNNs static, dynamic and pre-processed."""
    for mod in ("torch", "torchvision", "transformers"):
        monkeypatch.setitem(sys.modules, mod, None)
    import build
    import make_zoo

    assert make_zoo.main is build.main
    assert make_zoo.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    listed = {lines[i].split()[0]: lines[i + 1].split() for i in range(0, len(lines) - 1, 2)}
    four = {"qop_u8s8_pt", "qop_s8s8_pc", "qdq_u8s8_pc", "qdq_s8s8_pt"}
    for arch in ("mobilenet_v2", "mobilenet_v3_small", "resnet18", "efficientnet_b0"):
        assert four | {f"{v}_pre" for v in four} <= set(listed[arch])
    for arch in ("bert", "vit", "gpt2", "lstm", "gru"):
        v = set(listed[arch])
        assert four <= v and {"dyn_u8s8_pt", "dyn_u8s8_pt_pre", "qop_u8s8_pt_pre"} <= v
