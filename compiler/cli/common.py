"""What the command-line tools share: one-line errors, exit codes, model and target loading.

Every expected failure (bad file, unsupported op, bad option value, proof-store
problem) is a `prover.errors.BadInput` (e.g. `UsageError`) and becomes a one-line
message and exit code 2; a read-only proof-gate miss (`StoreMiss`) exits 5;
anything else is a bug in the tool and exits 4 with a pointer to `--debug`.
"""

from __future__ import annotations

import argparse
import gc
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from compiler.cli.inputs_read import InputsRead, sha256
from prover.errors import BadInput, StoreMiss

DIST_NAME = "npu-fusion-prover"


class UsageError(BadInput):
    """Bad usage or bad input: reported as one line, exit code 2."""


def tool_version() -> str:
    """The installed package version ("0+unknown" when not installed)."""
    from importlib import metadata  # lazy: it costs more than the rest of start-up

    try:
        return metadata.version(DIST_NAME)
    except metadata.PackageNotFoundError:
        return "0+unknown"


class LazyHelp(str):
    """An option's help (and metavar) that imports something to write them: `write()`
    gives (metavar, help); `Parser` calls it only when it shows help or usage."""

    write: Callable[[], tuple[str, str]]

    def __new__(cls, write: Callable[[], tuple[str, str]]) -> LazyHelp:
        obj = super().__new__(cls, "")
        obj.write = write
        return obj


class VersionAction(argparse.Action):
    """`--version`: print "<prog> <version>" and exit 0, reading the version only then
    (argparse's own action needs the string when the parser is built)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kw: Any) -> None:
        kw.setdefault("help", "show the version and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"{parser.prog} {tool_version()}")
        parser.exit()


class Parser(argparse.ArgumentParser):
    """argparse with a single-line error message (and exit code 2), and options whose
    help is costly to write (`LazyHelp`) written only when help or usage is shown."""

    def _write_lazy_help(self) -> None:
        for a in self._actions:  # (argument groups share the parser's actions)
            if isinstance(a.help, LazyHelp):
                a.metavar, a.help = a.help.write()

    def format_usage(self) -> str:
        self._write_lazy_help()
        return super().format_usage()

    def format_help(self) -> str:
        self._write_lazy_help()
        if self.epilog and REFERENCE_PROFILES in self.epilog:  # written only when shown
            self.epilog = self.epilog.replace(REFERENCE_PROFILES, reference_profiles_help())
        return super().format_help()

    def error(self, message: str) -> NoReturn:
        from compiler.report.model import ExitCode  # lazy: it imports numpy

        self.exit(ExitCode.BAD_INPUT, f"{self.prog}: error: {message} (see --help)\n")


def expected_errors() -> tuple[type[BaseException], ...]:
    """The exception classes that mean bad input (exit 2), never a tool bug.

    Our own errors all derive from `prover.errors.BadInput`; the third-party ones
    are the ONNX checker's and protobuf's errors on a malformed model file.
    """
    import onnx.checker
    import onnx.shape_inference
    from google.protobuf.message import DecodeError

    return (
        BadInput,
        OSError,
        onnx.checker.ValidationError,
        onnx.shape_inference.InferenceError,
        DecodeError,
    )


def one_line(e: BaseException) -> str:
    """An exception as one line (its message, first line, without the class noise), with
    control characters (e.g. of a node name) shown escaped, never sent to the terminal."""
    from compiler.report.inert import visible

    text = str(e).strip() or type(e).__name__
    first = text.split("\n")[0].strip()
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        first = f"{e.strerror}: {e.filename}"
    return visible(first)


# The collector's first threshold while a command runs (CPython's default 700). A large
# per-channel model builds about a million long-lived objects (terms, obligations,
# verdicts: one set per output column), and with the default every 70k net allocations
# consider a full collection, which runs each time the heap grew by a quarter: 13 full
# collections, 2.8 s of a 31.7 s efficientnet_b0 QDQ per-channel check, against 0.7 s in
# all collections at 20k (none full; the same peak RSS). Young collections stay cheap.
GC_YOUNG_THRESHOLD = 20_000


def run_main(prog: str, body: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run `body(args)`, turning expected errors into exit 2 and bugs into exit 4."""
    debug = bool(getattr(args, "debug", False))
    from compiler.report.model import ExitCode  # lazy: it imports numpy
    from npu_backend.ort_logging import show_ort_logs

    show_ort_logs(debug)

    threshold = gc.get_threshold()
    gc.set_threshold(max(threshold[0], GC_YOUNG_THRESHOLD), *threshold[1:])
    try:
        return int(body(args))
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except StoreMiss as e:  # a read-only gate miss that reached the top: its own code
        if debug:
            traceback.print_exc()
        print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
        return ExitCode.PROOF_MISSING
    except expected_errors() as e:
        if debug:
            traceback.print_exc()
        print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except Exception as e:  # noqa: BLE001 - the top level decides what a bug is
        if debug:
            traceback.print_exc()
        print(
            f"{prog}: internal error ({type(e).__name__}: {one_line(e)}); "
            "rerun with --debug for the traceback and report it",
            file=sys.stderr,
        )
        return ExitCode.INTERNAL
    finally:
        gc.set_threshold(*threshold)


def check_model_file(
    path: str, external: list[str] | None = None, read: InputsRead | None = None
) -> Any:
    """Load and validate an ONNX file once (`compiler.frontend.checked.CheckedModel`, which
    the compiler takes without checking again), raising `UsageError` naming what is wrong
    (or `FrontendError` when strict shape inference fails, as the frontend would).

    Tensors stored in external-data files are read from the model's directory; their
    locations are appended to `external` when it is given. `read` receives the digests
    of the bytes read (model file, each external tensor), as they were read."""
    import onnx
    from google.protobuf.message import DecodeError

    from compiler.frontend.checked import check_structure, infer

    p = Path(path)
    if not p.exists():
        raise UsageError(f"model file not found: {path}")
    if p.is_dir():
        raise UsageError(f"model path is a directory, not an ONNX file: {path}")
    data = p.read_bytes()
    if not data:
        raise UsageError(f"model file is empty: {path}")
    if read is not None:
        read.model = sha256(data)
    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise UsageError(
            f"not a valid ONNX model (truncated or not ONNX): {path}: {one_line(e)}"
        ) from None
    if not model.HasField("graph") or len(model.graph.node) == 0:
        raise UsageError(f"not a valid ONNX model (no graph or no nodes; truncated?): {path}")
    locations = external_data_locations(model)
    if external is not None:
        external.extend(locations)
    if locations:  # weights in side files, named relative to the model
        from onnx.external_data_helper import load_external_data_for_model

        try:
            pending = _external_tensors(model) if read is not None else []
            load_external_data_for_model(model, str(p.parent))
        except (OSError, ValueError, RuntimeError, onnx.checker.ValidationError) as e:
            raise UsageError(f"external data of {path} cannot be read: {one_line(e)}") from None
        for t, loc, offset, to_end in pending:
            assert read is not None
            read.add_external(loc, offset, to_end, t.raw_data)
    # the file's own bytes are the model where no external tensor was read into it: the
    # checker and the shape inference take them instead of the model serialised again
    raw = None if locations else data
    try:
        check_structure(model if raw is None else raw)
    except (onnx.checker.ValidationError, ValueError, RuntimeError) as e:
        # ValueError covers UnicodeDecodeError: the checker decodes names and strings
        # of a corrupt file as UTF-8 before it can say anything about them.
        raise UsageError(f"invalid ONNX model {path}: {one_line(e)}") from None
    return infer(model, raw)


def _tensors(model: Any) -> Any:
    """Every tensor of `model` an external-data file can hold: initializers, Constant
    values and subgraphs' tensors, in the graph and in its functions."""
    from onnx import AttributeProto

    def nodes(nodelist: Any) -> Any:
        for node in nodelist:
            for a in node.attribute:
                if a.type == AttributeProto.TENSOR:
                    yield a.t
                elif a.type == AttributeProto.TENSORS:
                    yield from a.tensors
                elif a.type == AttributeProto.GRAPH:
                    yield from graph(a.g)
                elif a.type == AttributeProto.GRAPHS:
                    for g in a.graphs:
                        yield from graph(g)

    def graph(g: Any) -> Any:
        yield from g.initializer
        yield from nodes(g.node)

    yield from graph(model.graph)
    for f in model.functions:
        yield from nodes(f.node)


def _external_tensors(model: Any) -> list[tuple[Any, str, int, bool]]:
    """(tensor, location, offset, whether it is read to the end of the file) of every
    tensor of `model` held in an external-data file, before it is loaded (ValueError for
    an offset that is not an integer)."""
    from onnx import TensorProto

    out = []
    for t in _tensors(model):
        if t.data_location == TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            offset = int(info.get("offset") or 0)
            out.append((t, info.get("location", ""), offset, not info.get("length")))
    return out


def external_data_locations(model: Any) -> list[str]:
    """The side files (as named in the model, relative to its directory) holding tensors of
    `model` (an `onnx.ModelProto`): initializers, Constant values and subgraphs' tensors."""
    from onnx import TensorProto

    out: list[str] = []
    for t in _tensors(model):
        if t.data_location == TensorProto.EXTERNAL:
            loc = next((e.value for e in t.external_data if e.key == "location"), "")
            if loc not in out:
                out.append(loc)
    return out


def resolve_target(spec: str | None, read: InputsRead | None = None) -> Any:
    """Load a target: None = the default, a TOML path, or a shipped target's name. `read`
    receives what was loaded: "default", "name:N", or the digest of the file's bytes."""
    from npu_backend.target import load_target, load_target_bytes, shipped_targets

    if spec is None:
        if read is not None:
            read.target = "default"
        return load_target(None)
    p = Path(spec)
    if not p.exists() and spec in shipped_targets():
        if read is not None:
            read.target = f"name:{spec}"  # its file is part of the tool's fingerprint
        return load_target(shipped_targets()[spec])
    if not p.exists():
        names = ", ".join(sorted(shipped_targets()))
        raise UsageError(f"target file not found: {spec} (shipped targets: {names})")
    target, raw = load_target_bytes(p)
    if read is not None:
        read.target = f"file:{sha256(raw)}"
    return target


def parse_policy(text: str) -> Any:
    """argparse type: a `prover.policy.Policy` from "bitwise" or "bounded:N"."""
    from prover.policy import Policy

    try:
        return Policy.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


REFERENCE_PROFILES = "{reference profiles}"  # an epilog's place for `reference_profiles_help`


def reference_profiles_help() -> str:
    """The epilog section listing every --reference profile, one entry each (shared by
    every command that has the option; written only when help is shown)."""
    import textwrap

    from prover.reference import HOST, PROFILES

    entries = [(n, p.summary) for n, p in PROFILES.items()]
    entries.append((HOST, "the profile this machine's ONNX Runtime matches, probed once"))
    out = ['reference profiles (--reference; what "equals ONNX Runtime" means):']
    for name, summary in entries:
        out.append(f"  {name}")
        out += textwrap.wrap(summary, 88, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(out) + "\n"


def add_reference_option(p: Any) -> None:
    """`--reference PROFILE`: what "equals ONNX Runtime" means (prover.reference); the
    default (None) is `prover.reference.DEFAULT_PROFILE`. The help names the default; the
    profiles are listed once, in the epilog (`REFERENCE_PROFILES`), written only when shown
    (the parser stays cheap for a run served at start-up)."""

    def write() -> tuple[str, str]:
        from prover.reference import CHOICES, DEFAULT_PROFILE

        return "{" + ",".join(CHOICES) + "}", (
            f"reference semantics the model is checked against (default {DEFAULT_PROFILE}; "
            "every profile is listed under 'reference profiles' below)"
        )

    p.add_argument("--reference", default=None, metavar="PROFILE", help=LazyHelp(write))


def add_synthesis_option(p: Any) -> None:
    """`--synthesize` (default) / `--no-synthesize`: fixed-point parameter synthesis."""
    p.add_argument(
        "--synthesize",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="where the rounded fixed-point requantization of a column group is refuted, "
        "search the target's declared parameter space ([compute.*] synthesis) and prove "
        "the proposal (prover.synthesis); on by default, a no-op on targets that declare "
        "no space; --no-synthesize keeps the rounded parameters only",
    )


def add_schedule_strategy_option(p: Any) -> None:
    """`--schedule-strategy`: when a fused site's scheduling structure is decided."""
    from compiler.ir.strategy import DEFAULT_STRATEGY, ScheduleStrategy

    p.add_argument(
        "--schedule-strategy",
        choices=[s.value for s in ScheduleStrategy],
        default=DEFAULT_STRATEGY.value,
        help=f"when fusion learns the scheduling structure (default {DEFAULT_STRATEGY.value}): "
        "early = query the target before proving; alternatives = prove, then keep the unfused "
        "form where the fused one's structure cannot be generated; late = schedule the "
        "unfused graph first, then fuse knowing it (compiler.ir.structure)",
    )


def _float_where(text: str, ok: Callable[[float], bool], rule: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not ok(v):  # NaN fails every comparison, so it is refused too
        raise argparse.ArgumentTypeError(f"must be {rule}: {text!r}")
    return v


def positive_float(text: str) -> float:
    """argparse type: a float > 0."""
    return _float_where(text, lambda v: v > 0, "> 0")


def non_negative_float(text: str) -> float:
    """argparse type: a float >= 0."""
    return _float_where(text, lambda v: v >= 0, ">= 0")


PROOFS_HELP = """proof store (the CI gate):
  Nothing is read or written unless --proofs DIR names a store (then the mode defaults
  to rw). A served record is never trusted on its word: a stored "proven" is re-decided
  within --recheck-budget seconds (default 5), a stored refutation is replayed; a
  "proven" that cannot be re-decided in the budget is served only with a valid
  HMAC-SHA256 signature by the key in --proof-key-file or env NPUFUSION_PROOF_KEY
  (records written with a key are signed), otherwise it counts as missing.
"""


def add_proof_store_options(p: Any) -> None:
    """--proofs, --proofs-mode, --proof-key-file, --recheck-budget and --solver."""
    from prover.solver_names import SOLVERS
    from prover.trust import DEFAULT_RECHECK_BUDGET_S, KEY_ENV

    p.add_argument(
        "--proofs", metavar="DIR", default=None, help="proof store directory (default: none)"
    )
    p.add_argument(
        "--proofs-mode",
        choices=("rw", "ro", "off"),
        default=None,
        help="rw: read and record; ro: every obligation must have a trusted record (CI gate, "
        "exit 5 otherwise); off: ignore the store (default: rw with --proofs, else off)",
    )
    p.add_argument(
        "--proof-key-file",
        metavar="FILE",
        help=f"key that signs and verifies proof records (default: env {KEY_ENV})",
    )
    p.add_argument(
        "--recheck-budget",
        type=non_negative_float,
        default=DEFAULT_RECHECK_BUDGET_S,
        metavar="SECONDS",
        help="time to re-decide each stored 'proven' before requiring a signature "
        f"(default {DEFAULT_RECHECK_BUDGET_S:g}; 0 = always require one)",
    )
    p.add_argument(
        "--solver",
        default="auto",
        choices=SOLVERS,
        metavar="NAME",
        help=f"decision procedure: {', '.join(SOLVERS)} (enum = enumerate; default auto)",
    )


def warn_float_compute(prog: str, report: Any) -> list[str]:
    """One line on stderr when compute ops run in float on the host (`float_compute`);
    returns the lines printed."""
    f = report.float_compute
    if f is None:
        return []
    gate = " (the gate fails: exit 7)" if report.require_quantized else ""
    line = f"{prog}: warning: {f['message']}{gate}"
    print(line, file=sys.stderr)
    return [line]


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """What both tools ask of a compilation, in the help group "what is checked": the
    model, policy, target, reference, synthesis and schedule strategy."""
    parser.add_argument("model", metavar="MODEL", help="ONNX model file")
    p = parser.add_argument_group("what is checked")
    p.add_argument(
        "--policy",
        type=parse_policy,
        default=None,
        metavar="bitwise|bounded:N",
        help="equivalence policy (default: bitwise)",
    )
    p.add_argument(
        "--target",
        metavar="FILE",
        help="target description TOML, or a shipped target's name (default: npu_float)",
    )
    add_reference_option(p)
    add_synthesis_option(p)
    add_schedule_strategy_option(p)


def add_indent_option(p: Any, what: str) -> None:
    """`--indent N` for a JSON report (`what` names it in the help)."""
    p.add_argument(
        "--indent",
        type=non_negative_int,
        default=None,
        metavar="N",
        help=f"{what}: pretty-print with N spaces (default compact)",
    )


def add_verbose_option(p: Any) -> None:
    """`-v/--verbose`: the text report's long form."""
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="text report: every reason in full with its action, every check's items, "
        "whole hashes (default: one line of at most 160 characters per site)",
    )


def add_run_options(parser: argparse.ArgumentParser) -> tuple[Any, Any]:
    """The proof store (help group "proof store"), then the per-obligation timeout, the
    float gate, progress and tracebacks (group "run"); returns both groups."""
    store = parser.add_argument_group("proof store (the CI gate; details below)")
    add_proof_store_options(store)
    p = parser.add_argument_group("run")
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="time to decide each obligation before it is unknown (default 10)",
    )
    p.add_argument(
        "--require-quantized",
        action="store_true",
        help="exit 7 when a compute op (MatMul, Gemm, Conv, ...) runs in float on the host, "
        "i.e. the model or part of it is not quantized (always on with --proofs-mode ro)",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="never draw a progress bar (default: drawn on a terminal after 0.5 s)",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    return store, p


def _int_at_least(text: str, low: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < low:
        raise argparse.ArgumentTypeError(f"must be >= {low}: {text!r}")
    return v


def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: an int >= 0."""
    return _int_at_least(text, 0)


def argv_or_default(argv: Sequence[str] | None) -> list[str]:
    return list(sys.argv[1:] if argv is None else argv)
