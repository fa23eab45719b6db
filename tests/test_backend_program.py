"""Program files: deterministic bytes, round trip, corrupt files rejected."""

import io
import json
import zipfile

import numpy as np
import pytest
from test_backend_support import fused_post, matmul_model, requant_post, x_input

from npu_backend.codegen import generate
from npu_backend.lowered import HostKernel, LoweredModel, TensorSpec
from npu_backend.program import Program, ProgramError
from npu_backend.simulator import run
from npu_backend.target import load_target
from prover.terms import Var, op

FLOAT = load_target()
FIXED = load_target("npu_backend/targets/npu_fixed.toml")


def _program():
    model = matmul_model(tuple(fused_post(FIXED, scale=0.003 + 0.001 * j) for j in range(8)))
    model.steps.append(HostKernel("hk", ("y",), "z", op("mul_const", Var("y"), c=2), "int16"))
    model.outputs = ["z"]
    return generate(model, FIXED)


def test_round_trip_and_deterministic_bytes(tmp_path):
    prog = _program()
    path = tmp_path / "p.npuprog"
    prog.save(path)
    again = Program.load(path)
    assert again.instructions == prog.instructions
    assert again.to_bytes() == path.read_bytes() == _program().to_bytes()
    streamed = io.BytesIO()
    prog.write(streamed)  # the manifest written piece by piece: the same bytes
    assert streamed.getvalue() == path.read_bytes()
    text = zipfile.ZipFile(path).read("manifest.json").decode()
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    a, _ = run(prog, x_input())
    b, _ = run(again, x_input())
    assert np.array_equal(a["z"], b["z"]) and b["z"].dtype == np.int16


def test_listing_names_every_instruction():
    prog = generate(matmul_model(requant_post(FLOAT)), FLOAT)
    lines = prog.listing().splitlines()
    assert len(lines) == len(prog.instructions) and "MatMul(" in lines[-2]


def _rewrite_manifest(data, fn):
    zin = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for n in zin.namelist():
            body = zin.read(n)
            if n == "manifest.json":
                m = json.loads(body)
                fn(m)
                body = json.dumps(m).encode()
            z.writestr(n, body)
    return out.getvalue()


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (lambda d: b"hello", "not a zip"),
        (lambda d: d[: len(d) // 2], "not a zip|corrupt"),
        (
            lambda d: _rewrite_manifest(d, lambda m: m.update(format="other")),
            "unknown program format",
        ),
        (lambda d: _rewrite_manifest(d, lambda m: m.update(version=99)), "version 99"),
        (
            lambda d: _rewrite_manifest(d, lambda m: m["instructions"][0].update(op="Nop")),
            "unknown instruction",
        ),
        (lambda d: _rewrite_manifest(d, lambda m: m.pop("tensors")), "corrupt"),
        (
            lambda d: _rewrite_manifest(d, lambda m: m["constants"].update(w="constants/9.npy")),
            "corrupt",
        ),
    ],
)
def test_corrupt_files_rejected(tmp_path, corrupt, message):
    path = tmp_path / "bad.npuprog"
    path.write_bytes(corrupt(_program().to_bytes()))
    with pytest.raises(ProgramError, match=message):
        Program.load(path)


def test_missing_file(tmp_path):
    with pytest.raises(ProgramError, match="cannot read"):
        Program.load(tmp_path / "nope")


def test_host_onnx_blob_round_trip(tmp_path):
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Relu", ["a"], ["b"])],
        "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    from npu_backend.lowered import HostOnnx

    model = LoweredModel(
        [TensorSpec("a", "float32", (3,))], ["b"], {},
        [HostOnnx("relu", m.SerializeToString(), ("a",), ("b",))],
    )  # fmt: skip
    prog = generate(model, FLOAT)
    prog.save(tmp_path / "h.npuprog")
    again = Program.load(tmp_path / "h.npuprog")
    out, _ = run(again, {"a": np.array([-1.5, 0.0, 2.5], np.float32)})
    assert out["b"].tolist() == [0.0, 0.0, 2.5]


def test_run_file_round_trip(tmp_path):
    from npu_backend.runner import run_file
    from npu_backend.simulator import SimulatorError

    prog = _program()
    prog.save(tmp_path / "p.npuprog")
    np.savez(tmp_path / "in.npz", **x_input())
    outs, counters = run_file(tmp_path / "p.npuprog", tmp_path / "in.npz", tmp_path / "out.npz")
    with np.load(tmp_path / "out.npz") as z:
        assert set(z.files) == {"z"} and np.array_equal(z["z"], run(prog, x_input())[0]["z"])
    assert counters.instructions == len(prog.instructions)
    np.savez(tmp_path / "wrong.npz", y=np.zeros(3))
    with pytest.raises(SimulatorError, match="missing input 'x'"):
        run_file(tmp_path / "p.npuprog", tmp_path / "wrong.npz", tmp_path / "o.npz")
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(ProgramError, match="cannot read inputs"):
        run_file(tmp_path / "p.npuprog", tmp_path / "junk.npz", tmp_path / "o.npz")


def _per_channel_program():
    from models import matmul_activation

    from compiler.api import compile_model

    r = compile_model(matmul_activation(K=16, N=24, per_channel=True))
    return generate(r.lowered, FLOAT)


def _manifest(data: bytes) -> dict:
    return json.loads(zipfile.ZipFile(io.BytesIO(data)).read("manifest.json"))


def test_a_per_channel_epilogue_writes_its_table_once_and_reads_back_equal():
    prog = _per_channel_program()
    data = prog.to_bytes()
    m = _manifest(data)
    assert m["version"] == 2 and len(m["tables"]) == 1 and len(m["tables"][0]) == 256
    (mm,) = [i for i in m["instructions"] if i["op"] == "MatMul"]
    posts = mm["fields"]["post"]
    assert len(posts) == 24
    assert all(p["__post__"]["lut"]["table"] == {"__table__": 0} for p in posts)
    back = Program.from_bytes(data)
    assert back.instructions == prog.instructions and back.to_bytes() == data


def test_a_version_1_program_with_its_tables_inline_still_loads():
    prog = _per_channel_program()
    data = prog.to_bytes()

    def inline(m):
        tables = m.pop("tables")
        for ins in m["instructions"]:
            for v in ins["fields"].values():
                for p in v if isinstance(v, list) else [v]:
                    lut = p.get("__post__", {}).get("lut") if isinstance(p, dict) else None
                    if lut and isinstance(lut["table"], dict):
                        lut["table"] = tables[lut["table"]["__table__"]]
        m["version"] = 1

    old = _rewrite_manifest(data, inline)
    assert "__table__" not in zipfile.ZipFile(io.BytesIO(old)).read("manifest.json").decode()
    assert Program.from_bytes(old).instructions == prog.instructions


def test_a_table_reference_out_of_range_is_a_corrupt_program():
    data = _per_channel_program().to_bytes()
    bad = _rewrite_manifest(data, lambda m: m.update(tables=[]))
    with pytest.raises(ProgramError, match="corrupt"):
        Program.from_bytes(bad)


def test_a_per_column_epilogue_is_written_from_one_text_per_shape_with_the_same_bytes():
    """A per-column epilogue's posts are written from the first one's text with each
    column's scale filled in: the manifest is byte for byte the one written post by post,
    with mixed shapes (another table, zero point, clip, function; a fixed-point requantizer
    without a float scale; repeated objects; extreme scales) and the tables in the same
    order."""
    import dataclasses

    import npu_backend.program as P
    from npu_backend.postprocess import LutParams

    base = [fused_post(FLOAT, scale=s) for s in (0.003, 1e-300, 5e-324, 0.1, 3.0, 0.003)]
    other_lut = base[0].lut
    assert other_lut is not None
    other = dataclasses.replace(other_lut, table=tuple(reversed(other_lut.table)))
    assert isinstance(other, LutParams)
    posts = (
        base[1], base[0], base[0], base[2], base[3],
        dataclasses.replace(base[4], lut=other), fused_post(FLOAT, scale=0.2, zp=5),
        fused_post(FLOAT, scale=0.25, clip=(-3, 9)), fused_post(FLOAT, "tanh", scale=0.4),
        fused_post(FIXED, scale=0.004), base[5], base[4],
    )  # fmt: skip
    spliced, plain = P._Pool(), P._Pool()
    want = P._MANIFEST_TEXT([P._encode(p, plain) for p in posts])
    assert P._posts_text(posts, spliced) == want
    assert list(spliced.tables.items()) == list(plain.tables.items()) and len(plain.tables) == 4
    # whole programs: the spliced instructions give the bytes of instructions written whole
    one = [fused_post(FLOAT, scale=0.003 * (j + 1), zp=j % 3) for j in range(7)]
    lut = one[0].lut
    model = matmul_model(tuple(dataclasses.replace(p, lut=lut) for p in [*one, one[2]]))
    prog = generate(model, FLOAT)
    whole = Program(**{f.name: getattr(prog, f.name) for f in dataclasses.fields(prog)})
    got = prog.to_bytes()
    keep = P._instruction_text
    try:
        P._instruction_text = lambda ins, pool: P._MANIFEST_TEXT(P._encode_instruction(ins, pool))
        assert whole.to_bytes() == got
    finally:
        P._instruction_text = keep
    assert Program.from_bytes(got).instructions == prog.instructions


def test_a_per_channel_epilogue_as_made_is_written_at_once_with_the_same_bytes(monkeypatch):
    """Posts alike but for their requantization scale (the other fields the same objects:
    `with_requants`) are written from one template at once, extreme scales included: the
    text written post by post. A post whose scale is not a finite float, or one field of
    another object, is written post by post (the general path)."""
    import dataclasses

    import npu_backend.program as P

    p = fused_post(FLOAT, scale=0.003, clip=(-7, 90))
    scales = [0.003, 1e-300, 5e-324, 0.1, 3.0, 0.003, 2.0**-126]
    posts = tuple(p.with_requants(p.requant.with_scales(scales)))
    calls: list[int] = []
    real = P._post_text
    monkeypatch.setattr(P, "_post_text", lambda q, pool: calls.append(1) or real(q, pool))
    for case in (
        posts,
        (*posts[:3], dataclasses.replace(posts[3], clip=tuple([-7, 90])), *posts[4:]),
        (*posts[:2], posts[2].copy_with(requant=posts[2].requant.with_scales([float("inf")])[0]),
         *posts[3:]),
    ):  # fmt: skip
        calls.clear()
        spliced, plain = P._Pool(), P._Pool()
        want = P._MANIFEST_TEXT([P._encode(q, plain) for q in case])
        assert P._posts_text(case, spliced) == want
        assert list(spliced.tables.items()) == list(plain.tables.items())
        assert (calls == []) == (case is posts)  # only the posts as made are written at once


def test_the_streamed_manifest_is_the_one_built_whole():
    """The program file is written instruction by instruction, its host subgraphs named
    first and its tables last: the manifest is the canonical JSON of the whole program
    built at once, and each blob holds the subgraph its instruction names (two host steps,
    one subgraph object used twice, a per-column epilogue with its table)."""
    import dataclasses

    from onnx import TensorProto, helper

    import npu_backend.program as P
    from npu_backend.isa import HostCall
    from npu_backend.lowered import HostOnnx

    def relu(name, a, b):
        g = helper.make_graph(
            [helper.make_node("Relu", ["a"], ["b"], name=name)],
            name,
            [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3])],
            [helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
        m.ir_version = 10
        return HostOnnx(name, m.SerializeToString(), (a,), (b,))

    first = relu("r1", "a", "b")
    twice = dataclasses.replace(first, name="r3", inputs=("c",), outputs=("d",))
    posts = tuple(fused_post(FLOAT, scale=0.003 * (j + 1), zp=j % 3) for j in range(8))
    lut = posts[0].lut
    model = matmul_model(tuple(dataclasses.replace(p, lut=lut) for p in posts))
    prog = generate(model, FLOAT)
    host = [HostCall("h1", first), HostCall("h2", relu("r2", "b", "c")), HostCall("h3", twice)]
    prog = dataclasses.replace(prog, instructions=[*host, *prog.instructions, host[0]])
    pool = P._Pool()
    whole = {
        "format": P.FORMAT, "version": P.VERSION, "target": prog.target,
        "inputs": [P._spec_json(s) for s in prog.inputs], "outputs": list(prog.outputs),
        "tensors": [P._spec_json(s) for s in prog.tensors.values()],
        "constants": {n: f"constants/{k:04d}.npy" for k, n in enumerate(sorted(prog.constants))},
        "instructions": [P._encode_instruction(i, pool) for i in prog.instructions],
    }  # fmt: skip
    whole["tables"] = [list(t) for t in pool.tables]
    z = zipfile.ZipFile(io.BytesIO(prog.to_bytes()))
    assert z.read("manifest.json").decode() == P._MANIFEST_TEXT(whole)
    assert len(pool.blobs) == 4 and {n: z.read(n) for n in pool.blobs} == pool.blobs
    assert len(whole["tables"]) == 1
