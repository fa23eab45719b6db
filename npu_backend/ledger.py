"""The cost ledger: what each fusion saves, MEASURED by simulating fused and unfused programs.

For every fused MatMul of a lowered model, the program is generated twice: as is,
and with only that site split (`lowered.unfuse`: MatMul with requantize[+clip],
then a standalone activation). Both run on the simulator with the same inputs;
the differences in counters are the entry. Both runs must give identical outputs
(they compute the same kernel terms), otherwise `LedgerError` is raised.

A fusion that absorbed a QLinearAdd bias (the epilogue's add stage) is measured against
the original's three ops: MatMul(requantize), the QLinearAdd on the host (the NPU's
standalone unit has none; its per-column function as one table lookup), the activation.
The entry then names the removed op and the dram traffic the host round trip cost.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from prover.inttypes import int_type
from prover.terms import Var, op

from .codegen import generate, infer_specs
from .lowered import HostKernel, LoweredModel, NpuLut, NpuMatMul, Step, TensorSpec, unfuse
from .postprocess import posts_of
from .simulator import Counters, run
from .target import Target


class LedgerError(RuntimeError):
    """Fused and unfused programs disagree (a backend bug), or the model has no inputs to run."""


@dataclass(frozen=True, kw_only=True)
class FusionEntry:
    """Measured effect of one fusion (fused minus unfused, as positive savings)."""

    site: str
    onnx_nodes: tuple[str, ...]
    intermediate: str  # the tensor the fusion no longer materialises
    elements: int  # E
    element_bytes: int  # b
    bytes_not_written: int  # measured: sram bytes written, unfused - fused
    bytes_not_read: int  # measured: sram bytes read, unfused - fused
    table_loads_added: int  # measured: fused - unfused table loads
    param_loads_added: int
    instructions_before: int  # unfused program
    instructions_after: int  # fused program
    removed_ops: tuple[str, ...] = ()  # ops the fusion absorbed besides the activation
    dram_bytes_not_moved: int = 0  # measured: dram bytes read + written, unfused - fused

    @property
    def expected_bytes(self) -> int:
        """E x b: the intermediate tensor's size."""
        return self.elements * self.element_bytes

    def to_json(self) -> dict:
        d = asdict(self)
        d["onnx_nodes"] = list(self.onnx_nodes)
        d["removed_ops"] = list(self.removed_ops)
        d["expected_bytes"] = self.expected_bytes
        return d


def random_inputs(specs: list[TensorSpec], seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic random inputs covering each integer type's full range."""
    rng = np.random.default_rng(seed)
    out = {}
    for s in specs:
        dt = np.dtype(s.dtype)
        if dt.kind in "iu":
            info = np.iinfo(dt)
            out[s.name] = rng.integers(info.min, int(info.max) + 1, s.shape).astype(dt)
        else:
            out[s.name] = rng.standard_normal(s.shape).astype(dt)
    return out


def _dram(c: Counters) -> int:
    return c.bytes_written["dram"] + c.bytes_read["dram"]


def unfuse_with_add(step: NpuMatMul) -> tuple[list[Step], dict[str, np.ndarray]]:
    """`unfuse`, with an epilogue add stage split out as the original's host QLinearAdd.

    Returns the steps and the constants they add (the column index of each element).
    """
    posts = posts_of(step.post)
    adds = [p.add for p in posts if p.add is not None]
    if not step.fused or not adds or len(adds) != len(posts):
        return unfuse(step), {}  # no add stage, or only on some columns: not split
    ty = int_type(adds[0].type)
    n = len(posts)
    if n * ty.size > 65536:
        return unfuse(step), {}  # not expressible as one uint16-indexed table: not split
    mm, act = unfuse(step)
    if not (isinstance(mm, NpuMatMul) and isinstance(act, NpuLut)):
        raise LedgerError(f"{step.name}: unfuse did not give a MatMul and an activation")
    inner = tuple(p.requant_only() for p in posts) if n > 1 else posts[0].requant_only()
    pre_add = f"{step.out}.pre_add"
    mm = replace(mm, out=pre_add, post=inner)
    # per column j the add is a table over the 8-bit value: one lookup at j*size + (x - min)
    table = [v for a in adds for v in a.table()] + [0] * (65536 - n * ty.size)
    col = f"{step.out}.column"
    index = op(
        "add", op("mul_const", Var(col), c=ty.size), op("add_const", Var(pre_add), c=-ty.min)
    )
    term = op("lut", index, table=tuple(table), in_type="uint16", index_order="offset")
    add = HostKernel(f"{step.name}.add", (pre_add, col), act.x, term, ty.name, step.onnx_nodes)
    # uint8: the host reads one byte per column, as the QLinearAdd reads its 8-bit bias
    return [mm, add, act], {col: np.arange(n, dtype=np.uint8)}


def _sram(c: Counters) -> tuple[int, int]:
    return c.bytes_written["sram"], c.bytes_read["sram"]


def ledger(
    lowered: LoweredModel,
    target: Target,
    inputs: dict[str, np.ndarray] | None = None,
) -> list[FusionEntry]:
    """One measured `FusionEntry` per fused MatMul in `lowered`."""
    inputs = inputs if inputs is not None else random_inputs(lowered.inputs)
    fused_prog = generate(lowered, target)
    fused_out, fused_c = run(fused_prog, inputs)
    entries = []
    for k, st in enumerate(lowered.steps):
        if not (isinstance(st, NpuMatMul) and st.fused):
            continue
        split, extra = unfuse_with_add(st)
        steps = lowered.steps[:k] + split + lowered.steps[k + 1 :]
        unfused = LoweredModel(
            list(lowered.inputs), list(lowered.outputs), {**lowered.constants, **extra}, steps
        )
        prog = generate(unfused, target)
        out, c = run(prog, inputs)
        for name in fused_out:
            if not np.array_equal(fused_out[name], out[name]):
                raise LedgerError(f"{st.name}: fused and unfused programs differ on {name!r}")
        act = split[-1]
        if not isinstance(act, NpuLut):
            raise LedgerError(f"{st.name}: the split does not end in a standalone activation")
        mid = act.x
        spec = infer_specs(unfused)[mid]
        if spec is None:
            raise LedgerError(f"{st.name}: the shape of intermediate {mid!r} is unknown")
        w_f, r_f = _sram(fused_c)
        w_u, r_u = _sram(c)
        entries.append(
            FusionEntry(
                site=st.name,
                onnx_nodes=tuple(st.onnx_nodes),
                intermediate=mid,
                elements=int(np.prod(spec.shape)),
                element_bytes=np.dtype(spec.dtype).itemsize,
                bytes_not_written=w_u - w_f,
                bytes_not_read=r_u - r_f,
                table_loads_added=fused_c.table_loads - c.table_loads,
                param_loads_added=fused_c.param_loads - c.param_loads,
                instructions_before=c.instructions,
                instructions_after=fused_c.instructions,
                removed_ops=("QLinearAdd",) if len(split) == 3 else (),
                dram_bytes_not_moved=_dram(c) - _dram(fused_c),
            )
        )
    return entries
