"""A generated NPU program and its file format.

File format (deterministic bytes): a zip archive, entries stored uncompressed
with fixed timestamps, in sorted order:
- `manifest.json` (compact JSON, keys sorted): `{"format": "npu-program", "version": 2,
  "target", "inputs", "outputs", "tensors", "constants": {name: entry},
  "instructions": [...], "tables": [...]}`, plus `"dynamic_batch": [input names]` when
  the model's batch dimension is symbolic; an epilogue's LUT names its table by index in
  "tables" (`{"__table__": k}`); version 1 files, which repeat the table, still load;
- `constants/NNNN.npy`: one array per constant (weights, biases, tables);
- `blobs/NNNN.bin`: opaque bytes (serialized ONNX subgraphs of host steps).
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import IO, Any, BinaryIO

import numpy as np

from prover.conv import Window, window_from_json
from prover.eltwise import EltwiseParams
from prover.errors import BadInput
from prover.terms import from_json as term_from_json
from prover.terms import to_json as term_to_json

from .isa import OPCODES, Instruction
from .lowered import ORT_LEVELS, HostKernel, HostOnnx, TensorSpec
from .postprocess import (
    ColumnPosts,
    LutParams,
    PostProcess,
    RequantParams,
    alike_but_scale,
    per_column,
)

FORMAT = "npu-program"
VERSION = 2  # 2: each distinct LUT table once, in "tables" (`_Pool`)
READABLE = (1, 2)
_DATE = (1980, 1, 1, 0, 0, 0)


class ProgramError(BadInput, ValueError):
    """A program file that is missing, corrupt, or of an unknown format/version."""


@dataclass
class Program:
    """Instructions plus everything needed to run them (constants, tensor specs)."""

    target: str
    inputs: list[TensorSpec]
    outputs: list[str]
    tensors: dict[str, TensorSpec]
    constants: dict[str, np.ndarray]
    instructions: list[Instruction] = field(default_factory=list)
    # inputs whose leading dimension is the batch: the program is compiled for one row and
    # runs any number of rows in one pass (npu_backend.runner.run_batched)
    dynamic_batch: tuple[str, ...] = ()

    def ops(self, kind: type | str | None = None) -> list[Instruction]:
        """Instructions, optionally only those of one class (or class name)."""
        if kind is None:
            return list(self.instructions)
        name = kind if isinstance(kind, str) else kind.__name__
        return [i for i in self.instructions if type(i).__name__ == name]

    def listing(self) -> str:
        """A human-readable one-line-per-instruction listing."""
        lines = []
        for k, ins in enumerate(self.instructions):
            desc = ", ".join(
                f"{f.name}={_short(getattr(ins, f.name))}"
                for f in fields(ins)
                if f.name not in ("post", "step")
            )
            lines.append(f"{k:4d} {type(ins).__name__}({desc})")
        return "\n".join(lines)

    # --- file format ----------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The program file's bytes (same program -> same bytes): `write` to memory."""
        out = io.BytesIO()
        self.write(out)
        return out.getvalue()

    def write(self, f: BinaryIO) -> None:
        """Write the program file to the seekable binary file `f` (the bytes `to_bytes`
        gives). The archive lists the host subgraphs' blobs before the manifest: they are
        named first (`_name_blobs`), then each instruction is encoded and written into the
        manifest in turn, and the tables its LUTs named come last (the manifest's keys are
        sorted: "tables" follows "instructions"). Neither the manifest's text nor all the
        instructions' texts are ever in memory at once: a per-channel CNN's instructions are
        about 20 MB of text, most of its compile's peak."""
        pool = _Pool()
        const_entries = {
            name: f"constants/{k:04d}.npy" for k, name in enumerate(sorted(self.constants))
        }
        _name_blobs(self.instructions, pool)
        head: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "target": self.target,
            "inputs": [_spec_json(s) for s in self.inputs],
            "outputs": list(self.outputs),
            "tensors": [_spec_json(s) for s in self.tensors.values()],
            "constants": const_entries,
        }
        if self.dynamic_batch:  # absent otherwise: older programs keep their bytes
            head["dynamic_batch"] = list(self.dynamic_batch)
        files = {entry: name for name, entry in const_entries.items()}
        with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
            for name in sorted([*files, *pool.blobs, "manifest.json"]):
                info = zipfile.ZipInfo(name, date_time=_DATE)
                info.external_attr = 0o644 << 16
                if name == "manifest.json":
                    texts = (_instruction_text(i, pool) for i in self.instructions)
                    with z.open(info, "w") as out:
                        _write_manifest(out, head, texts, lambda: [list(t) for t in pool.tables])
                elif name in pool.blobs:
                    z.writestr(info, pool.blobs[name])
                else:
                    buf = io.BytesIO()
                    np.lib.format.write_array(
                        buf, np.ascontiguousarray(self.constants[files[name]])
                    )
                    z.writestr(info, buf.getvalue())

    def save(self, path: str | Path) -> None:
        """Write the program file (same program -> same bytes)."""
        with open(path, "wb") as f:
            self.write(f)

    @staticmethod
    def from_bytes(data: bytes, where: str = "<bytes>") -> Program:
        try:
            z = zipfile.ZipFile(io.BytesIO(data))
        except zipfile.BadZipFile:
            raise ProgramError(f"{where}: not an NPU program file (not a zip archive)") from None
        try:
            with z:
                names = set(z.namelist())
                if "manifest.json" not in names:
                    raise ProgramError(f"{where}: not an NPU program file (no manifest.json)")
                m = json.loads(z.read("manifest.json"))
                if m.get("format") != FORMAT:
                    raise ProgramError(f"{where}: unknown program format {m.get('format')!r}")
                if m.get("version") not in READABLE:
                    raise ProgramError(
                        f"{where}: program format version {m.get('version')!r} is not "
                        f"supported (expected one of {', '.join(map(str, READABLE))})"
                    )
                constants = {
                    name: np.load(io.BytesIO(z.read(entry)), allow_pickle=False)
                    for name, entry in m["constants"].items()
                }
                pool = _Pool(
                    blobs={n: z.read(n) for n in names if n.startswith("blobs/")},
                    read=[tuple(int(v) for v in t) for t in m.get("tables", [])],
                )
                tensors = [_spec_from(s) for s in m["tensors"]]
                return Program(
                    target=m["target"],
                    inputs=[_spec_from(s) for s in m["inputs"]],
                    outputs=list(m["outputs"]),
                    tensors={s.name: s for s in tensors},
                    constants=constants,
                    instructions=[_decode_instruction(i, pool) for i in m["instructions"]],
                    dynamic_batch=tuple(str(n) for n in m.get("dynamic_batch", [])),
                )
        except ProgramError:
            raise
        except (
            KeyError,
            TypeError,
            ValueError,
            AttributeError,
            IndexError,
            zipfile.BadZipFile,
            OSError,
        ) as e:
            raise ProgramError(f"{where}: corrupt program file ({type(e).__name__}: {e})") from None

    @staticmethod
    def load(path: str | Path) -> Program:
        """Read a program file, raising `ProgramError` on any problem."""
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise ProgramError(f"cannot read program file {str(path)!r}: {e.strerror}") from None
        return Program.from_bytes(data, str(path))


# --- encoding helpers -------------------------------------------------------------------


def _short(v: Any) -> str:
    if isinstance(v, tuple | ColumnPosts) and len(v) > 4:
        return f"({v[0]}, ... {len(v)} items)"
    return repr(v)


def _spec_json(s: TensorSpec) -> dict[str, Any]:
    return {"name": s.name, "dtype": s.dtype, "shape": list(s.shape)}


def _spec_from(j: dict[str, Any]) -> TensorSpec:
    return TensorSpec(j["name"], j["dtype"], tuple(int(v) for v in j["shape"]))


@dataclass
class _Pool:
    """What a program file holds once and names where it is used: host subgraphs
    (`blobs/`), and since version 2 every distinct LUT table (the manifest's "tables"; a
    per-channel MatMul's thousands of column epilogues share one table, which version 1
    repeated in each: 46 MB of efficientnet_b0's 49 MB manifest)."""

    blobs: dict[str, bytes] = field(default_factory=dict)
    tables: dict[tuple[int, ...], int] = field(default_factory=dict)  # written: table -> index
    read: list[tuple[int, ...]] = field(default_factory=list)  # read: index -> table
    luts: dict[int, tuple[LutParams, dict[str, Any]]] = field(default_factory=dict)
    # written: `_post_text`'s templates (a few per program); blobs named ahead (`_name_blobs`)
    named: deque[str] = field(default_factory=deque)
    templates: dict[tuple[Any, ...], tuple[str, str] | None] = field(default_factory=dict)

    def lut_json(self, lut: LutParams) -> dict[str, Any]:
        """`lut.to_json()` with its table named by index; built once per LutParams."""
        hit = self.luts.get(id(lut))
        if hit is not None and hit[0] is lut:
            return hit[1]
        table = lut.table
        j = {**lut.to_json(table=False)}
        if table is not None:
            j["table"] = {"__table__": self.tables.setdefault(tuple(table), len(self.tables))}
        self.luts[id(lut)] = (lut, j)
        return j

    def post_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """A read `__post__` body with its table reference resolved."""
        lut = body.get("lut")
        if isinstance(lut, dict) and isinstance(lut.get("table"), dict):
            lut = {**lut, "table": self.read[int(lut["table"]["__table__"])]}
            body = {**body, "lut": lut}
        return body


def _encode(v: Any, pool: _Pool) -> Any:
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, int | np.integer):
        return int(v)
    if isinstance(v, float | np.floating):
        return float(v)
    if isinstance(v, PostProcess):
        return {"__post__": v.to_json(lut_json=pool.lut_json)}
    if isinstance(v, RequantParams):
        return {"__rq__": v.to_json()}
    if isinstance(v, TensorSpec):
        return {"__spec__": _spec_json(v)}
    if isinstance(v, EltwiseParams):
        return {"__eltwise__": v.params()}
    if isinstance(v, Window):
        return {"__window__": v.to_json()}
    if isinstance(v, HostKernel):
        return {
            "__host_kernel__": {
                "name": v.name,
                "inputs": list(v.inputs),
                "out": v.out,
                "term": term_to_json(v.term),
                "out_dtype": v.out_dtype,
                "onnx_nodes": list(v.onnx_nodes),
            }
        }
    if isinstance(v, HostOnnx):
        key = pool.named.popleft() if pool.named else _blob(v, pool)
        return {
            "__host_onnx__": {
                "name": v.name,
                "model": key,
                "inputs": list(v.inputs),
                "outputs": list(v.outputs),
                "output_specs": [_spec_json(s) for s in v.output_specs],
                "onnx_nodes": list(v.onnx_nodes),
                # written only where it is not "off", so older programs keep their bytes
                **({"ort_level": v.ort_level} if v.ort_level != "off" else {}),
            }
        }
    if isinstance(v, tuple | list | ColumnPosts):
        return [_encode(x, pool) for x in v]
    raise TypeError(f"cannot encode {type(v).__name__} in a program file")


def _decode(v: Any, pool: _Pool) -> Any:
    if isinstance(v, list):
        return tuple(_decode(x, pool) for x in v)
    if not isinstance(v, dict):
        return v
    (tag, body), *_ = v.items()
    if tag == "__post__":
        return PostProcess.from_json(pool.post_body(body))
    if tag == "__rq__":
        return RequantParams.from_json(body)
    if tag == "__spec__":
        return _spec_from(body)
    if tag == "__eltwise__":
        return EltwiseParams(**body)
    if tag == "__window__":
        return window_from_json(body)
    if tag == "__host_kernel__":
        return HostKernel(
            body["name"],
            tuple(body["inputs"]),
            body["out"],
            term_from_json(body["term"]),
            body["out_dtype"],
            tuple(body["onnx_nodes"]),
        )
    if tag == "__host_onnx__":
        return HostOnnx(
            body["name"],
            pool.blobs[body["model"]],
            tuple(body["inputs"]),
            tuple(body["outputs"]),
            tuple(_spec_from(s) for s in body["output_specs"]),
            tuple(body["onnx_nodes"]),
            _ort_level(body.get("ort_level", "off")),
        )
    raise ValueError(f"unknown tagged value {tag!r}")


def _ort_level(level: object) -> str:
    if level not in ORT_LEVELS:
        raise ValueError(f"unknown host ONNX Runtime level {level!r}")
    return str(level)


# Fields added after version 1, written only when they differ from their default, so an
# untiled program keeps the bytes it had before tiling existed.
_LATER_FIELDS = frozenset({"cols", "tile", "w_addr", "w_stationary", "window", "unit"})


# the manifest's JSON text: one line, keys sorted, by json's C encoder (an indent makes json
# use its pure-Python one: 1.7 s for the 7 MB manifest of a per-channel CNN)
_MANIFEST_TEXT = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def _write_manifest(
    out: IO[bytes],
    head: dict[str, Any],
    instructions: Iterable[str],
    tables: Callable[[], list[list[int]]],
) -> None:
    """`_MANIFEST_TEXT` of `head` with `instructions` (each instruction's text, made as it
    is written) under the key "instructions" and `tables()` (asked for when its key comes,
    after the instructions) under "tables", written piece by piece: the same text, never
    whole in memory."""
    keys = sorted([*head, "instructions", "tables"])
    assert keys.index("tables") > keys.index("instructions")
    out.write(b"{")
    for n, k in enumerate(keys):
        out.write(f"{',' if n else ''}{_MANIFEST_TEXT(k)}:".encode())
        if k != "instructions":
            out.write(_MANIFEST_TEXT(tables() if k == "tables" else head[k]).encode())
            continue
        out.write(b"[")
        for m, text in enumerate(instructions):
            out.write(f"{',' if m else ''}{text}".encode())
        out.write(b"]")
    out.write(b"}")


# a stand-in for a scale in a post's text (`_posts_text`): a subnormal no model uses
_SCALE_MARK = 4.9406564584124654e-322
_SCALE_MARK_TEXT = repr(_SCALE_MARK)
_POSTS_MARK = "\x00per-column epilogue\x00"


def _instruction_text(ins: Instruction, pool: _Pool) -> str:
    """`_MANIFEST_TEXT(_encode_instruction(ins, pool))`, a per-column epilogue's list
    written by `_posts_text` and spliced in."""
    posts = getattr(ins, "post", None)
    if not (per_column(posts) and len(posts) > 1):
        return _MANIFEST_TEXT(_encode_instruction(ins, pool))
    body = _encode_instruction(ins, pool, keep=("post",))
    text = _MANIFEST_TEXT({**body, "fields": {**body["fields"], "post": _POSTS_MARK}})
    mark = _MANIFEST_TEXT(_POSTS_MARK)
    if text.count(mark) != 1:  # a name holding the marker: written whole
        return _MANIFEST_TEXT({**body, "fields": {**body["fields"], "post": _encode(posts, pool)}})
    return text.replace(mark, _posts_text(posts, pool))


def _posts_text(posts: Sequence[PostProcess], pool: _Pool) -> str:
    """`_MANIFEST_TEXT([_encode(p, pool) for p in posts])`. A per-channel epilogue has
    thousands of columns alike but for their requantization scale: the first one's text is
    written with a marker for the scale and the others fill it in (the encoder writes a
    finite float as its `repr`); tables enter the pool in the same order."""
    alike = (
        _scales_text(posts.first, posts.scales, pool)
        if isinstance(posts, ColumnPosts)
        else _alike_text(posts, pool)
    )
    if alike is not None:
        return alike
    texts: dict[int, str] = {}  # by id: a group's columns share one object
    out: list[str] = []
    for p in posts:
        t = texts.get(id(p))
        if t is None:
            t = texts[id(p)] = _post_text(p, pool)
        out.append(t)
    return "[" + ",".join(out) + "]"


def _alike_text(posts: Sequence[PostProcess], pool: _Pool) -> str | None:
    """`_posts_text` where every post is the first one but for its requantization's scale
    (`alike_but_scale`: a per-channel op's columns as made) and each scale a finite float:
    the first one's template filled with each scale at once; else None."""
    if not alike_but_scale(posts):
        return None
    return _scales_text(posts[0], [p.requant.scale for p in posts], pool)


def _scales_text(first: PostProcess, scales: Sequence[Any], pool: _Pool) -> str | None:
    """`_posts_text` of columns that are `first` but for their scales `scales`, where each
    is a finite float: `first`'s template filled with each scale; else None."""
    if not all(type(v) is float and math.isfinite(v) for v in scales):
        return None
    parts = _template(first, pool)
    if parts is None:
        return None
    head, tail = parts
    return "[" + ",".join([head + repr(v) + tail for v in scales]) + "]"


def _post_text(p: PostProcess, pool: _Pool) -> str:
    scale = p.requant.scale
    if not (isinstance(scale, float | np.floating) and math.isfinite(scale)):
        return _MANIFEST_TEXT(_encode(p, pool))
    parts = _template(p, pool)
    if parts is None:
        return _MANIFEST_TEXT(_encode(p, pool))
    return parts[0] + repr(float(scale)) + parts[1]


def _template(p: PostProcess, pool: _Pool) -> tuple[str, str] | None:
    """The text of `p` but its requantization scale, as the two parts around that scale
    (None where its text does not hold it once), made once per shape in the pool."""
    rq = p.requant
    key = (rq.scheme, rq.zp, rq.out_type, rq.multiplier, rq.shift, p.clip, p.function,
           id(p.lut), p.out_type, p.out_zp, p.add)  # fmt: skip
    parts = pool.templates.get(key)
    if parts is None and key not in pool.templates:
        marked = replace(p, requant=replace(rq, scale=_SCALE_MARK))
        text = _MANIFEST_TEXT(_encode(marked, pool))
        split = text.split(_SCALE_MARK_TEXT)
        parts = pool.templates[key] = (split[0], split[1]) if len(split) == 2 else None
    return parts


def _blob(v: HostOnnx, pool: _Pool) -> str:
    """A new blob of the pool holding `v`'s model: its name."""
    key = f"blobs/{len(pool.blobs):04d}.bin"
    pool.blobs[key] = bytes(v.model)
    return key


def _name_blobs(instructions: Iterable[Instruction], pool: _Pool) -> None:
    """Each host subgraph of `instructions` put in the pool in the order `_encode` meets
    them, its name queued for `_encode` to take (the names the encoding gives alone)."""

    def walk(v: Any) -> None:
        if isinstance(v, HostOnnx):
            pool.named.append(_blob(v, pool))
        elif isinstance(v, tuple | list):
            for x in v:
                walk(x)

    for ins in instructions:
        for _, v in _written_fields(ins):
            walk(v)


def _written_fields(ins: Instruction) -> Iterator[tuple[str, Any]]:
    """(name, value) of each field a program file holds for `ins`: a field added later with
    a default is written only where it differs (older programs keep their bytes)."""
    for f in fields(ins):
        v = getattr(ins, f.name)
        if f.name not in _LATER_FIELDS or v != f.default:
            yield f.name, v


def _encode_instruction(
    ins: Instruction, pool: _Pool, keep: tuple[str, ...] = ()
) -> dict[str, Any]:
    return {
        "op": type(ins).__name__,
        "fields": {
            name: None if name in keep else _encode(v, pool) for name, v in _written_fields(ins)
        },
    }


def _decode_instruction(j: dict[str, Any], pool: _Pool) -> Instruction:
    cls = OPCODES.get(j["op"])
    if cls is None:
        raise ProgramError(f"unknown instruction {j['op']!r}")
    names = {f.name for f in fields(cls)}
    # fields added later with a default (e.g. MatMul's tiling) may be absent in older files
    required = {f.name for f in fields(cls) if f.default is MISSING}
    if not required <= set(j["fields"]) <= names:
        raise ProgramError(f"instruction {j['op']} has fields {sorted(j['fields'])}")
    return cls(**{k: _decode(v, pool) for k, v in j["fields"].items()})
