"""One layout on the NPU: consecutive NPU convs (and pools) read each other's channels-last
results directly; a layout transpose is kept only where a host op (or a graph output) reads
the NCHW tensor, and each elided pair is an index-map obligation proven the identity. The
transposes left, and reshapes of NPU results, are NPU gathers (`NpuMove`) whose index map is
proven equal to the op's meaning, on targets that move data; else host ops."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from pool_models import conv_chain, pool_inputs

from compiler.api import compile_model
from compiler.ir.layout import transpose_chain_terms
from compiler.ort.tables import session
from npu_backend import codegen, simulator
from npu_backend.lowered import HostOnnx, NpuMatMul, NpuMaxPool, NpuMove
from npu_backend.target import load_target
from prover.api import check
from prover.obligation import Obligation
from prover.policy import Policy
from prover.verdict import Status

FLOAT = load_target("npu_backend/targets/npu_float.toml")
NO_MOVES = dataclasses.replace(FLOAT, standalone=dataclasses.replace(FLOAT.standalone, moves=False))


def _transposes(r) -> list[HostOnnx | NpuMove]:
    return [
        s
        for s in r.lowered.steps
        if isinstance(s, HostOnnx | NpuMove) and s.name.endswith(".transpose")
    ]


def _host(r) -> list[HostOnnx]:
    return [s for s in r.lowered.steps if isinstance(s, HostOnnx)]


def _equal(m, r, target=FLOAT) -> None:
    prog = codegen.generate(r.lowered, target)
    for seed in range(3):
        inp = pool_inputs(m, seed)
        ref = session(m, level="default").run(None, inp)
        got = simulator.run(prog, inp)[0]
        for o, v in zip(m.graph.output, ref, strict=True):
            np.testing.assert_array_equal(v, got[o.name])


@pytest.mark.parametrize(
    "convs, pool, target",
    [
        (("3x3", "1x1", "dw"), False, FLOAT),
        (("3x3", "mp", "1x1"), True, FLOAT),
        (("3x3", "1x1", "dw"), False, NO_MOVES),
        pytest.param(("1x1", "3x3"), True, FLOAT, marks=pytest.mark.slow),
        pytest.param(("dw",), True, FLOAT, marks=pytest.mark.slow),
        pytest.param(("1x1", "3x3"), True, NO_MOVES, marks=pytest.mark.slow),
        pytest.param(("3x3", "mp", "1x1"), True, NO_MOVES, marks=pytest.mark.slow),
    ],
    ids=[
        "chain",
        "chain_maxpool_pool",
        "chain_no_moves",
        "pool",
        "dw_pool",
        "pool_no_moves",
        "maxpool_no_moves",
    ],
)
def test_consecutive_npu_ops_keep_one_layout(convs, pool, target):
    m = conv_chain(convs, pool=pool)
    r = compile_model(m, "bitwise", target)
    mms = [s for s in r.lowered.steps if isinstance(s, NpuMatMul | NpuMaxPool)]
    assert len(mms) == len(convs) + pool, r.diagnostics
    # only where data crosses: the graph input in, the result out
    assert len(_transposes(r)) == 2, [s.name for s in r.lowered.steps]
    assert len(_host(r)) == (0 if target is FLOAT else 2)
    for prev, nxt in zip(mms, mms[1:], strict=False):
        # channels-last, straight from the NPU op before
        assert (nxt.x if isinstance(nxt, NpuMaxPool) else nxt.a) == prev.out
    _equal(m, r, target)


def test_a_host_reader_keeps_its_transpose_and_the_npu_reads_its_own_layout():
    m = conv_chain(("3x3", "3x3"), expose=0)
    r = compile_model(m, "bitwise", FLOAT)
    mms = [s for s in r.lowered.steps if isinstance(s, NpuMatMul)]
    assert mms[1].a == mms[0].out
    assert len(_transposes(r)) == 3  # in, the exposed NCHW c0_out, out
    _equal(m, r)


@pytest.mark.slow
def test_a_flatten_of_an_npu_result_is_an_npu_gather():
    m = conv_chain(("3x3",), pool=True, flatten=True)
    r = compile_model(m, "bitwise", FLOAT)
    assert not _host(r), [s.name for s in _host(r)]
    moves = [s for s in r.lowered.steps if isinstance(s, NpuMove)]
    assert moves[-1].onnx_nodes == ("flat",) and moves[-1].shape == (1, 4)
    _equal(m, r)
    r = compile_model(m, "bitwise", NO_MOVES)
    assert [s.onnx_nodes for s in _host(r)][-1] == ("flat",)
    _equal(m, r, NO_MOVES)


def test_a_corrupted_gather_is_caught(monkeypatch):
    from npu_backend import isa

    m = conv_chain(("3x3", "3x3"))
    r = compile_model(m, "bitwise", FLOAT)
    prog = codegen.generate(r.lowered, FLOAT)
    inp = pool_inputs(m, 0)
    ref = session(m).run(None, inp)[0]
    np.testing.assert_array_equal(ref, simulator.run(prog, inp)[0]["y"])
    real = isa.Move.compute
    monkeypatch.setattr(isa.Move, "compute", lambda self, x: np.flip(real(self, x)))
    assert not np.array_equal(ref, simulator.run(prog, inp)[0]["y"])


def test_move_index_map_is_proven_against_the_ops_meaning():
    from compiler.ir.graph import Node
    from compiler.ir.layout import move_terms
    from npu_backend.moves import row_major, transpose_strides

    def verdict(node, src, out, strides):
        before, after, size = move_terms(src, node, out, strides, 0)
        ob = Obligation("index_map", before, after, {"f": (0, size - 1)}, Policy(0))
        return check(ob).status

    t = Node("t", "transpose", ["x"], ["y"], {"perm": (0, 2, 3, 1)})
    src, out = (1, 3, 3, 3), (1, 3, 3, 3)
    assert verdict(t, src, out, transpose_strides(src, (0, 2, 3, 1))) == Status.PROVEN
    assert verdict(t, src, out, transpose_strides(src, (0, 3, 1, 2))) == Status.REFUTED
    assert verdict(t, src, out, row_major(out)) == Status.REFUTED  # a reshape hiding it
    rs = Node("r", "reshape", ["x"], ["y"], {"shape": (3, 9)})
    assert verdict(rs, src, (3, 9), row_major((3, 9))) == Status.PROVEN


def test_layout_index_maps_are_proven_and_a_wrong_one_refuted():
    shape = (1, 4, 4, 4)  # NHWC with C = H = W: a wrong permutation keeps the shape
    to_first, to_last = (0, 3, 1, 2), (0, 2, 3, 1)

    def verdict(perms):
        before, after, size = transpose_chain_terms(shape, perms)
        ob = Obligation("index_map", before, after, {"f": (0, size - 1)}, Policy(0))
        return check(ob).status

    assert verdict([to_first, to_last]) == Status.PROVEN
    assert verdict([to_first, to_first]) == Status.REFUTED
    assert verdict([to_last, to_last]) == Status.REFUTED


@pytest.mark.slow
def test_program_file_with_gathers_round_trips(tmp_path):
    from npu_backend.program import Program

    m = conv_chain(("3x3", "1x1"), pool=True, flatten=True)
    r = compile_model(m, "bitwise", FLOAT)
    prog = codegen.generate(r.lowered, FLOAT)
    prog.save(tmp_path / "p.npu")
    back = Program.load(tmp_path / "p.npu")
    inp = pool_inputs(m, 1)
    np.testing.assert_array_equal(
        simulator.run(prog, inp)[0]["y"], simulator.run(back, inp)[0]["y"]
    )
    assert back.ops("Move")


def test_two_npu_readers_of_one_host_tensor_share_its_gather():
    import onnx
    from onnx import helper as oh

    m = conv_chain(("3x3",))
    second = onnx.NodeProto()
    second.CopyFrom(m.graph.node[0])
    second.name, second.output[0] = "c_b", "y2"
    m.graph.node.append(second)
    m.graph.output.append(oh.make_tensor_value_info("y2", 3, [1, 4, 6, 5]))
    r = compile_model(m, "bitwise", FLOAT)
    names = [s.out for s in r.lowered.steps if isinstance(s, NpuMove)]
    assert names.count("x.nhwc") == 1, names
    _equal(m, r)


def test_a_repeated_layout_move_is_one_obligation_built_once():
    """Every block's transposes have the same shapes: their index-map obligation is built
    (and hashed) once and shared; it is the obligation the node itself gives, and a node
    whose attributes are not hashable still gets its own, equal, obligation."""
    import numpy as np

    from compiler.ir.graph import Node
    from compiler.ir.layout import move_terms
    from compiler.proving import moves
    from npu_backend.moves import transpose_strides
    from prover.obligation import Obligation
    from prover.policy import Policy

    src, perm = (1, 8, 5, 5), (0, 2, 3, 1)
    out = tuple(src[i] for i in perm)
    st = transpose_strides(src, perm)
    key = (src, "transpose", (("perm", perm),), out, st, 0)
    a = moves._shared_move_obligation(*key)
    assert moves._shared_move_obligation(*key) is a
    node = Node("t", "transpose", ["x"], ["y"], {"perm": perm})
    before, after, size = move_terms(src, node, out, st, 0)
    own = Obligation("index_map", before, after, {"f": (0, size - 1)}, Policy(0))
    assert a.hash == own.hash
    odd = Node("t", "transpose", ["x"], ["y"], {"perm": np.array(perm)})
    assert moves._hashable(odd.attrs) is None
    assert moves._move_obligation(src, odd, out, st, 0).hash == a.hash
    # another permutation is another obligation
    other = moves._shared_move_obligation(src, "transpose", (("perm", (0, 3, 2, 1)),), out, st, 0)
    assert other.hash != a.hash
