"""`npuc compile MODEL -o PROGRAM`, `npuc run PROGRAM --input IN.npz -o OUT.npz` and
`npuc inputs MODEL -o IN.npz [--from FLOAT.npz]` (the input file a model expects).

`compile` applies only proven rewrites (the compiler's gate decides) and writes an
NPU program file; `--report FILE` writes the JSON report (every site, its verdict,
and the measured ledger of each applied fusion). `run` executes a program on the
bit-exact simulator; inputs and outputs are keyed by the ONNX graph's names.
Exit codes: 0 success, 2 bad usage or bad input, 4 internal error, 5 proof gate failed
(`--proofs-mode ro` and an obligation without a trusted record; no program is written).
"""

from __future__ import annotations

import argparse
import json
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

from compiler import heap
from compiler.cli.common import (
    PROOFS_HELP,
    REFERENCE_PROFILES,
    Parser,
    UsageError,
    VersionAction,
    add_indent_option,
    add_model_options,
    add_run_options,
    add_verbose_option,
    argv_or_default,
    positive_int,
    run_main,
    warn_float_compute,
)
from compiler.cli.outputs import FORMATS, Staged, check_destination, render_report, report_format
from compiler.report.model import ExitCode
from compiler.report.words import plural
from prover.verdict import ReasonCode, Status

PROG = "npuc"
EXIT_HELP = """exit codes:
  0  program written (only proven fusions applied)
  2  bad usage or bad input (one-line error on stderr; nothing written)
  4  internal error (rerun with --debug for the traceback)
  5  proof gate failed (--proofs-mode ro): an obligation has no trusted record; nothing written
  7  a compute op runs in float on the host (not quantized) under --require-quantized or
     --proofs-mode ro; nothing written
"""
COMPILE_EXAMPLES = """examples:
  npuc compile model.onnx -o model.npuprog     only proven fusions reach the program
  npuc compile model.onnx -o model.npuprog --report report.html
                                               and the report (the format is the extension's)
  npuc compile model.onnx -o model.npuprog --onnx-out model_npu.onnx
                                               the compiled graph as ONNX, for Netron
  npuc compile model.onnx -o model.npuprog --proofs proofs --proofs-mode ro
                                               the CI gate: no program without every proof
"""
RUN_HELP = """examples:
  npuc inputs model.onnx -o in.npz --from float.npz
                                               the inputs, quantized as the model's own ops do
  npuc run model.npuprog --input in.npz -o out.npz --counters counters.json

exit codes:
  0  outputs written (and the counters, with --counters)
  2  bad usage or bad input: a missing or malformed program or input file, an input
     missing or of the wrong shape or dtype (one-line error on stderr)
  4  internal error (rerun with --debug for the traceback)
"""
INPUTS_HELP = """examples:
  npuc inputs model.onnx -o in.npz             a zero skeleton to fill
  npuc inputs model.onnx -o in.npz --from float.npz --batch 4

exit codes:
  0  IN.npz written
  2  bad usage or bad input (a bad model, --from data of the wrong names or shapes,
     inputs quantized with different parameters by the ops reading them)
  4  internal error (rerun with --debug for the traceback)
"""
TOP_EPILOG = """examples:
  npuc compile model.onnx -o model.npuprog --report report.html
  npuc inputs model.onnx -o in.npz --from float.npz
  npuc run model.npuprog --input in.npz -o out.npz
Run 'npuc COMMAND --help' for a command's options, examples and exit codes.
"""


def build_parser() -> argparse.ArgumentParser:
    """The `npuc` argument parser (subcommands `compile`, `run` and `inputs`)."""
    raw = argparse.RawDescriptionHelpFormatter
    p = Parser(
        prog=PROG,
        description="NPU compiler: only proven fusions reach the program.",
        epilog=TOP_EPILOG,
        formatter_class=raw,
    )
    p.add_argument("--version", action=VersionAction)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    c = sub.add_parser(
        "compile",
        help="compile an ONNX model to an NPU program file",
        description="Compile an ONNX model to an NPU program file, applying only the fusions "
        "the prover proves.",
        epilog="\n".join((COMPILE_EXAMPLES, PROOFS_HELP, REFERENCE_PROFILES, EXIT_HELP)),
        formatter_class=raw,
    )
    add_model_options(c)
    o = c.add_argument_group("outputs")
    o.add_argument("-o", "--output", required=True, metavar="PROGRAM", help="program file to write")
    o.add_argument(
        "--report",
        metavar="FILE",
        help="write the report (sites, ledger) here, in --format, else as its extension "
        "says (.json, .html/.htm, .md, .txt, .sarif, .xml); another extension is an error",
    )
    o.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="format of --report (default: from its extension; html needs the 'report' extra)",
    )
    o.add_argument(
        "--onnx-out",
        metavar="FILE",
        help="also write the compiled graph as ONNX, to look at in Netron: each NPU step a "
        "node of domain ai.npufusion naming the ops it fuses and the proofs it rests on, "
        "host ops as they are (not for running: ONNX Runtime has no NPU kernels)",
    )
    add_indent_option(o, "JSON report")
    add_verbose_option(o)
    o.add_argument(
        "--input",
        metavar="IN.npz",
        help="inputs the ledger measures the program on (default: made up in each input's "
        "legal range: a Gather's indices within its table, booleans, the full integer range)",
    )
    add_run_options(c)
    c.set_defaults(func=_compile)
    r = sub.add_parser(
        "run",
        help="run an NPU program on the simulator",
        description="Run an NPU program on the bit-exact simulator; inputs and outputs are "
        "keyed by the ONNX graph's names.",
        epilog=RUN_HELP,
        formatter_class=raw,
    )
    r.add_argument("program", metavar="PROGRAM", help="program file from npuc compile")
    r.add_argument("--input", required=True, metavar="IN.npz", help="inputs by graph input name")
    r.add_argument("-o", "--output", required=True, metavar="OUT.npz", help="outputs by name")
    r.add_argument(
        "--counters", metavar="FILE", help="write the simulator's traffic counters (JSON)"
    )
    r.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    r.set_defaults(func=_run)
    i = sub.add_parser(
        "inputs",
        help="write the IN.npz a model expects: a zero skeleton, or float data quantized "
        "with the model's own input parameters",
        description="Write an .npz keyed by the model's graph input names with their shapes "
        "and dtypes: zeros (a skeleton to fill), or --from float data (float inputs taken "
        "as float32; 8-bit inputs quantized by ONNX Runtime's QuantizeLinear with the scale "
        "and zero point of the model's own ops reading them; refused when two of them differ).",
        epilog=INPUTS_HELP,
        formatter_class=raw,
    )
    i.add_argument("model", metavar="MODEL", help="ONNX model file")
    i.add_argument("-o", "--output", required=True, metavar="IN.npz", help="file to write")
    i.add_argument(
        "--from", dest="source", metavar="FLOAT.npz", help="float data keyed by input name"
    )
    i.add_argument(
        "--batch",
        type=positive_int,
        default=None,
        metavar="N",
        help="size of a symbolic leading (batch) dimension (default 1)",
    )
    i.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=SIZE",
        help="size of a named symbolic dimension (repeatable)",
    )
    i.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    i.set_defaults(func=_inputs)
    return p


def _inputs(args: argparse.Namespace) -> int:
    import numpy as np

    from compiler.cli.common import check_model_file
    from compiler.frontend.model_inputs import from_float, input_specs, skeleton
    from npu_backend.runner import load_inputs, save_arrays

    model = check_model_file(args.model).proto
    dims: dict[str, int] = {}
    for d in args.dim:
        name, eq, size = d.partition("=")
        if not eq or not size.strip().isdigit() or int(size) < 1:
            raise UsageError(f"--dim {d!r}: expected NAME=SIZE with SIZE >= 1")
        dims[name.strip()] = int(size)
    if args.source is not None:
        if not Path(args.source).is_file() or not zipfile.is_zipfile(args.source):
            raise UsageError(f"--from is not an .npz archive: {args.source}")
        data = load_inputs(args.source)
        lead = {v.shape[0] for v in data.values() if np.ndim(v)}
        batch = args.batch if args.batch is not None or len(lead) != 1 else lead.pop()
        specs = input_specs(model, batch, dims)
        arrays, notes = from_float(model, specs, data)
    else:
        specs = input_specs(model, args.batch, dims)
        arrays = skeleton(specs)
        notes = [
            f"{s.name}: {s.dtype} {list(s.shape)}"
            + (f" (symbolic: {', '.join(s.symbolic)})" if s.symbolic else "")
            + " zeros"
            for s in specs
        ]
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_arrays(out, arrays)
    print(f"wrote {out}: " + "; ".join(notes))
    return ExitCode.OK


def _compile(args: argparse.Namespace) -> int:
    from compiler.cli.check_run import CheckOptions, print_store_summary, run_pipeline
    from compiler.passes.tile_columns import check_program
    from compiler.phases import phase
    from npu_backend.codegen import generate
    from npu_backend.ledger import model_ledger

    opts = CheckOptions.from_args(args)
    out = Path(args.output)
    if args.report == "-":
        raise UsageError("--report needs a file name (the program's summary is stdout's)")
    if args.format is not None and args.report is None:
        raise UsageError("--format applies to --report FILE; add one")
    kind = report_format(args.format, args.report, "--report", None)
    if args.indent is not None and kind != "json":
        raise UsageError(f"--indent applies to a JSON --report, not {kind or 'none'}")
    for path, option in (
        (args.output, "-o"),
        (args.report, "--report"),
        (args.onnx_out, "--onnx-out"),
    ):
        check_destination(path, option)  # before the work: nothing is written on bad usage
    if kind == "html":
        from compiler.report.plots import require_matplotlib

        require_matplotlib()  # before the work: a missing extra is bad usage (exit 2)
    run = run_pipeline(args.model, opts)
    print_store_summary(PROG, run, args.model)
    warn_float_compute(PROG, run.report)
    if run.report.proof_misses:
        return ExitCode.PROOF_MISSING
    if run.report.exit_code() == ExitCode.FLOAT_COMPUTE:
        return ExitCode.FLOAT_COMPUTE  # a gate: no program is written
    with phase("codegen"):
        program = generate(run.result.lowered, run.target)
        check_program(run.result.sites, run.result.lowered, program)
    given = None
    if args.input:
        from npu_backend.runner import load_inputs

        given = load_inputs(args.input)
    with phase("ledger"):
        measured = model_ledger(run.result.lowered, run.target, given, program)
        heap.release()  # the two simulated runs' tensors, before the program file is written
    entries = [e.to_json() for e in measured.fusions]
    total = measured.total_json()
    run.report.ledger = {"fusions": entries, "total": total}
    found = entries + total["not_measured"]  # a fused site without an unfused form: its reason
    for site in run.report.sites:
        mine = [e for e in found if set(e.get("onnx_nodes", ())) & set(site.nodes)]
        if site.verdict == Status.PROVEN and mine:
            site.ledger = mine[0]
    s = run.report.summary
    applied = sum(1 for site in run.report.sites if site.ledger is not None)
    for d in run.result.diagnostics:  # a proven fusion not applied
        if d.code == ReasonCode.BUFFERS_EXCEED_MEMORY:
            print(f"{PROG}: {d.message}", file=sys.stderr)
    staged = Staged()  # the program and the report are written together or not at all
    staged.add(out, program.write, "NPU program")  # written at commit, streamed
    if args.report and kind is not None:
        extra = {"program": str(out)} if kind == "json" else None
        text = render_report(kind, run, args.indent, extra, opts.progress, args.verbose)
        staged.add(args.report, text, f"{kind} report")
    if args.onnx_out:
        from compiler.report.onnx_out import onnx_view

        view = onnx_view(run)
        staged.add(args.onnx_out, view.SerializeToString(), "ONNX view of the compiled graph")
    lines = staged.commit()
    print(
        f"{lines[0]}: {applied} of {plural(s.candidates, 'candidate fusion')} applied "
        f"({s.refuted} refuted, {s.unknown} unknown, {s.rejected} rejected; "
        f"policy {run.report.policy}, target {run.report.target})"
    )
    for line in lines[1:]:
        print(line)
    for e in entries:
        if e.get("costs_more"):
            print(
                f"{PROG}: fusion {e['site']} ({', '.join(e['onnx_nodes'])}) costs more than it "
                f"saves on target {run.report.target}: {-e['saved']} {e['cost_basis']} more "
                "than unfused (see the report's ledger)"
            )
    return ExitCode.OK


def _run(args: argparse.Namespace) -> int:
    from npu_backend.runner import run_file

    for path, what in ((args.program, "program file"), (args.input, "input file")):
        if not Path(path).is_file():
            raise UsageError(f"{what} not found: {path}")
    if not zipfile.is_zipfile(args.input):
        raise UsageError(f"input file is not an .npz archive: {args.input}")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    outs, counters = run_file(args.program, args.input, out)
    if args.counters:
        Path(args.counters).write_text(json.dumps(counters.to_json(), indent=2) + "\n")
    shapes = ", ".join(f"{k} {'x'.join(map(str, v.shape))} {v.dtype}" for k, v in outs.items())
    print(f"wrote {out}: {shapes}; {counters.instructions} instructions")
    return ExitCode.OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `npuc` command; returns the exit code."""
    args = build_parser().parse_args(argv_or_default(argv))
    return run_main(PROG, args.func, args)


def console() -> None:
    """The console script: `main()`, then `fast_exit.exit_process` (no interpreter teardown)."""
    from compiler.cli.fast_exit import exit_process

    exit_process(main())


if __name__ == "__main__":
    console()
