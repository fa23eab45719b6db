"""`--emit-tests` on a model whose tensors live in external-data files (issue 28 #7).

ONNX Runtime cannot open such a model from its bytes alone (the side files are named
relative to the model's directory): the expected outputs are computed from the path, and
the replay directory gets a copy of every side file, so its test runs on its own.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
from cli_helpers import EXAMPLES, prover

from compiler.ort.tables import ort_outputs

SHOWCASE = EXAMPLES / "showcase.onnx"  # site mm_lut -> sig_lut is refuted bitwise
DATA = "weights/showcase.data"  # in a subdirectory: copied at the same relative path


def _external_showcase(tmp_path):
    path = tmp_path / "model" / "showcase.onnx"
    (path.parent / DATA).parent.mkdir(parents=True)
    onnx.save_model(
        onnx.load(str(SHOWCASE)),
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=DATA,
        size_threshold=0,
    )
    assert (path.parent / DATA).stat().st_size > 0
    return path


def test_ort_outputs_reads_external_data_from_the_models_directory(tmp_path):
    path = _external_showcase(tmp_path)
    x = {i.name: np.ones([d.dim_value for d in i.type.tensor_type.shape.dim], np.int8)
         for i in onnx.load(str(SHOWCASE)).graph.input}  # fmt: skip
    got, want = ort_outputs(path, x), ort_outputs(SHOWCASE, x)
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_a_refuted_site_of_an_external_data_model_gets_a_replay_test(tmp_path):
    path = _external_showcase(tmp_path)
    out = tmp_path / "cex"
    r = prover("check", path, "--proofs-mode", "off", "--no-progress", "--emit-tests", out)
    assert r.returncode == 1, r.stderr
    assert "no replay test written" not in r.stderr, r.stderr
    (d,) = out.iterdir()
    assert (d / "model.onnx").read_bytes() == path.read_bytes()
    assert (d / DATA).read_bytes() == (path.parent / DATA).read_bytes()
    spec = importlib.util.spec_from_file_location("gen_ext", next(d.glob("test_cex_*.py")))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.test_original_graph_gives_recorded_output()  # the copy loads without the original
    (path.parent / DATA).unlink()
    mod.test_refuted_rewrite_not_applied_or_fixed()
