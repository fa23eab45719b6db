"""Issue 24 item 3: no internal error on valid models. The ledger's made-up inputs stay in
each input's legal range (Gather indices in [0, rows), booleans), `npuc inputs --from`
takes int64 and bool arrays as they are, ORT's own log stays off stderr."""

from __future__ import annotations

import numpy as np
import onnx
from cli_helpers import npuc
from host_models import REPRODUCERS, feeds

from npu_backend.input_ranges import index_ranges
from npu_backend.ledger import random_inputs
from npu_backend.lowered import HostOnnx, TensorSpec


def _gather_step(rows: int) -> HostOnnx:
    from onnx import TensorProto as TP
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    table = nh.from_array(np.zeros((rows, 4), np.float32), "table")
    g = oh.make_graph(
        [oh.make_node("Gather", ["table", "ids"], ["r"], axis=0)],
        "g",
        [oh.make_tensor_value_info("ids", TP.INT64, [3])],
        [oh.make_tensor_value_info("r", TP.FLOAT, [3, 4])],
        [table],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    return HostOnnx("embed", m.SerializeToString(), ("ids",), ("r",))


def test_gather_indices_range_is_the_gathered_axis():
    steps = [_gather_step(10), _gather_step(7)]
    assert index_ranges(steps, ["ids"]) == {"ids": (0, 7)}  # every use accepts [0, 7)
    assert index_ranges(steps, ["other"]) == {}


def test_random_inputs_stay_in_their_range_and_type():
    specs = [
        TensorSpec("ids", "int64", (1000,)),
        TensorSpec("mask", "bool", (50,)),
        TensorSpec("q", "int8", (1000,)),
        TensorSpec("h", "float16", (4,)),
    ]
    x = random_inputs(specs, ranges={"ids": (0, 7)})
    assert x["ids"].dtype == np.int64 and x["ids"].min() >= 0 and x["ids"].max() < 7
    assert x["mask"].dtype == np.bool_ and set(np.unique(x["mask"])) <= {False, True}
    assert x["q"].min() < -100 and x["q"].max() > 100  # the full int8 range otherwise
    assert x["h"].dtype == np.float16


def test_compile_an_embedding_on_int64_ids(tmp_path):
    """GPT-2's crash: the ledger fed 2526497193922298463 into the embedding Gather (exit 4)."""
    path = tmp_path / "embed.onnx"
    onnx.save(REPRODUCERS["gather_embedding"](), path)
    r = npuc("compile", path, "-o", tmp_path / "p.npu", "--proofs-mode", "off")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # nor does ORT's own error log reach stderr


def test_inputs_from_takes_int64_and_bool_as_they_are(tmp_path):
    for name in ("gather_embedding", "bool_input"):
        m = REPRODUCERS[name]()
        onnx.save(m, tmp_path / f"{name}.onnx")
        data = feeds(m)
        data["q"] = data["q"].astype(np.float32) * 0.05  # float data, quantized by the tool
        np.savez(tmp_path / "f.npz", **data)
        out = tmp_path / f"{name}_in.npz"
        r = npuc("inputs", tmp_path / f"{name}.onnx", "--from", tmp_path / "f.npz", "-o", out)
        assert r.returncode == 0, r.stderr
        with np.load(out) as z:
            for k, v in data.items():
                if v.dtype.kind in "ib":
                    assert z[k].dtype == v.dtype and np.array_equal(z[k], v), k
        assert "as given" in r.stdout


def test_inputs_from_refuses_a_wrong_integer_type(tmp_path):
    m = REPRODUCERS["gather_embedding"]()
    onnx.save(m, tmp_path / "m.onnx")
    data = feeds(m)
    data["ids"] = data["ids"].astype(np.int32)
    np.savez(tmp_path / "f.npz", **data)
    r = npuc("inputs", tmp_path / "m.onnx", "--from", tmp_path / "f.npz", "-o", tmp_path / "o.npz")
    assert r.returncode == 2 and "int32" in r.stderr and "int64" in r.stderr


def _embedding_program(tmp_path):
    m = REPRODUCERS["gather_embedding"]()
    onnx.save(m, tmp_path / "m.onnx")
    good = feeds(m)
    bad = dict(good, ids=np.full_like(good["ids"], 99))  # the table has 10 rows
    np.savez(tmp_path / "good.npz", **good)
    np.savez(tmp_path / "bad.npz", **bad)
    return tmp_path / "m.onnx"


def test_compile_measures_the_ledger_on_given_inputs(tmp_path):
    model = _embedding_program(tmp_path)
    r = npuc("compile", model, "-o", tmp_path / "p.npu", "--input", tmp_path / "good.npz")
    assert r.returncode == 0, r.stderr
    r = npuc("compile", model, "-o", tmp_path / "q.npu", "--input", tmp_path / "bad.npz")
    assert r.returncode == 2 and "refuses the values" in r.stderr and "idx=99" in r.stderr


def test_ort_log_reaches_stderr_only_with_debug(tmp_path):
    """An index ORT refuses is the inputs' fault (exit 2, one line); ORT's own red log line
    is printed only with --debug."""
    model = _embedding_program(tmp_path)
    assert npuc("compile", model, "-o", tmp_path / "p.npu").returncode == 0
    args = ("run", tmp_path / "p.npu", "--input", tmp_path / "bad.npz", "-o", tmp_path / "o.npz")
    r = npuc(*args)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and ":onnxruntime:" not in r.stderr
    r = npuc(*args, "--debug")
    assert r.returncode == 2 and ":onnxruntime:" in r.stderr
