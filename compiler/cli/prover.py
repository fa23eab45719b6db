"""`prover check MODEL ...`: prove or refute every candidate fusion site of an ONNX model.

Exit codes: 0 every candidate decided and nothing refuted; 1 at least one refuted;
3 at least one unknown and none refuted; 2 bad usage or bad input; 4 internal error;
5 read-only proof gate: an obligation has no trusted record in the store;
6 --baseline: something got worse than in the baseline report.
`prover zoo MANIFEST|DIR` checks a model zoo on Dask distributed (`compiler.cli.zoo_cmd`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

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
    tool_version,
    warn_float_compute,
)
from compiler.cli.outputs import (
    FORMATS,
    check_destination,
    render_report,
    report_format,
    write_output,
)
from compiler.cli.zoo_cmd import add_baseline_option, add_zoo_parser

if TYPE_CHECKING:
    from compiler.report.model import Report

PROG = "prover"
EXIT_HELP = """exit codes:
  0  every candidate site decided and none refuted
  1  at least one site refuted (a counterexample was found and replayed)
  2  bad usage or bad input (one-line error on stderr; nothing written to the proof store)
  3  at least one site unknown (budget ran out) and none refuted
  4  internal error (rerun with --debug for the traceback)
  5  proof gate failed (--proofs-mode ro): an obligation has no record in the store,
     or one that could be neither re-decided in the budget nor verified by signature
  6  --baseline: something got worse than in the baseline report (a proven site refuted,
     unknown or rejected, a node moved to the host, a proven site gone, the NPU share of
     MACs down, the check time more than doubled); takes precedence over 1, 3 and 5
  7  a compute op runs in float on the host (the model, or part of it, is not
     quantized) under --require-quantized or --proofs-mode ro
"""


CHECK_EXAMPLES = """examples:
  prover check model.onnx                      text report: one line per site (-v: in full)
  prover check model.onnx -o report.html       HTML report (the format is the extension's)
  prover check model.onnx --policy bounded:1   allow fused outputs to differ by 1
  prover check model.onnx --proofs proofs      record the proofs (rw) for a CI gate
  prover check model.onnx --proofs proofs --proofs-mode ro --format sarif -o prover.sarif
                                               the CI gate: decide nothing new, fail on a miss
  prover check model.onnx --emit-tests regress/
                                               a replayable pytest per refuted site
"""
TOP_EPILOG = """examples:
  prover check model.onnx                      check one model
  prover zoo models/ --format markdown -o zoo.md
                                               check a directory of models
Run 'prover COMMAND --help' for a command's options, examples and exit codes.
"""


def build_parser() -> argparse.ArgumentParser:
    """The `prover` argument parser (subcommands `check` and `zoo`)."""
    p = Parser(
        prog=PROG,
        description="Formal legality checker for operator fusion in an NPU compiler.",
        epilog=TOP_EPILOG + "\n" + EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action=VersionAction)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    c = sub.add_parser(
        "check",
        help="check every candidate fusion site of an ONNX model",
        description="Prove or refute every candidate fusion site of an ONNX model.",
        epilog="\n".join((CHECK_EXAMPLES, PROOFS_HELP, REFERENCE_PROFILES, EXIT_HELP)),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_options(c)
    o = c.add_argument_group("report and outputs")
    o.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="report format (default: from -o's extension, else text; html: one "
        "self-contained file with the graph and plots, needs the 'report' extra; github: GitHub Actions annotations, one per finding)",
    )
    add_indent_option(o, "JSON")
    add_verbose_option(o)
    o.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the report here (default stdout); its extension names the format "
        "(.txt .json .sarif .xml .md .html); a missing directory is created",
    )
    o.add_argument(
        "--also-write",
        metavar="FILE",
        action="append",
        default=[],
        help="also write the report to FILE, in the format its extension names (repeatable; "
        "one check for annotations, SARIF and a summary: written with -o's file, all or none)",
    )
    o.add_argument(
        "--emit-tests",
        metavar="DIR",
        help="write a replayable pytest module and .npz data per refuted site",
    )
    add_baseline_option(o)
    store, run = add_run_options(c)
    store.add_argument(
        "--result-cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --proofs in rw mode, a signing key and --recheck-budget 0: answer an "
        "unchanged check (same model bytes, options, target file, tool sources, installed "
        "packages, CPU and Python) from its signed run record in the store's runs/ "
        "(local, git-ignored); --no-result-cache always checks",
    )
    run.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        metavar="N",
        help="worker processes deciding obligations (default 1; verdicts do not depend on it)",
    )
    add_zoo_parser(sub)
    return p


def _check(args: argparse.Namespace) -> int:
    from compiler.cli import run_record
    from compiler.cli.check_run import (
        CheckOptions,
        complete,
        print_store_summary,
        relied_on_records,
        run_pipeline,
    )
    from compiler.report.model import ExitCode

    if args.indent is not None and args.format != "json":
        raise UsageError(f"--indent applies to --format json, not {args.format}")
    opts = CheckOptions.from_args(args)
    check_destination(args.output, "-o")  # before the work: nothing is written on bad usage
    also = [(f, report_format(None, f, "--also-write", None)) for f in args.also_write]
    for f, _ in also:
        if f == "-":
            raise UsageError("--also-write needs a file; the report (-o) goes to stdout")
        check_destination(f, "--also-write")
    if args.emit_tests and Path(args.emit_tests).exists() and not Path(args.emit_tests).is_dir():
        raise UsageError(f"--emit-tests is not a directory: {args.emit_tests}")
    if "html" in (args.format, *(fmt for _, fmt in also)):
        from compiler.report.plots import require_matplotlib

        require_matplotlib()  # before the work: a missing extra is bad usage (exit 2)
    old = None
    if args.baseline is not None:
        from compiler.zoo.baseline import load as load_baseline

        old = load_baseline(args.baseline)  # before the work: a bad baseline is exit 2
    before = run_record.started(args)  # the run record's context, taken before the check
    run = run_pipeline(args.model, opts)
    report: Report = run.report
    changes: list = []
    if old is not None:
        from compiler.cli.zoo_cmd import check_against_baseline

        changes = check_against_baseline(args.baseline, old, report)
    if args.emit_tests:
        from compiler.regress.emit_tests import emit_tests

        target_file = str(run.target.path) if opts.target else None  # loaded once, by the run
        tests = emit_tests(report, args.model, args.emit_tests, target_file, run.external_data)
        print(f"{PROG}: {emitted_line(tests, args.emit_tests)}", file=sys.stderr)
    text = render_report(
        args.format, run, args.indent, progress=opts.progress, verbose=args.verbose
    )
    extra = [(f, render_report(str(fmt), run, None, progress=False), fmt) for f, fmt in also]
    write_output(text, args.output, PROG, f"{args.format} report", extra)
    lines = print_store_summary(PROG, run, args.model) + warn_float_compute(PROG, report)
    code = report.exit_code()
    if any(c.worse for c in changes):
        return ExitCode.WORSE  # no run record: its key cannot see the baseline's contents
    if run_record.applies(args) and args.baseline is None:  # records listed only then
        records = relied_on_records(run)
        run_record.save(PROG, args, run.inputs, text, code, lines, records, complete(run), before)
    return code


def emitted_line(tests: list[Path], directory: str) -> str:
    """The line naming what --emit-tests wrote (also when nothing: no site was refuted)."""
    if not tests:
        return f"--emit-tests: no refuted site, nothing written to {directory}"
    n = len(tests)
    return f"wrote {n} replay test{'' if n == 1 else 's'} (pytest modules and .npz data) to {directory}"


def resolve_format(args: argparse.Namespace) -> None:
    """`args.format` from --format, else -o's extension (`compiler.cli.outputs`), before
    anything reads it (the run record's key includes it)."""
    if args.command not in ("check", "zoo"):
        return
    args.format = report_format(args.format, args.output, "-o", "text")
    if args.command == "zoo":
        from compiler.cli.zoo_cmd import FORMATS as ZOO_FORMATS

        if args.format not in ZOO_FORMATS:
            raise UsageError(f"prover zoo writes {', '.join(ZOO_FORMATS)}, not {args.format}")


def _run(args: argparse.Namespace) -> int:
    if args.command == "zoo":
        from compiler.cli.zoo_cmd import zoo

        return zoo(args)
    return _check(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `prover` command; returns the exit code."""
    argv = argv_or_default(argv)
    if argv == ["--version"]:  # as argparse would, without importing the prover for the parser
        print(f"{PROG} {tool_version()}")
        return 0
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        resolve_format(args)
    except UsageError as e:
        parser.error(str(e))
    from compiler.cli.run_record import serve

    served = None
    if args.command == "check" and args.baseline is None:  # a record knows no baseline
        try:  # an unchanged check answered from its signed run record
            served = serve(PROG, args)
        except Exception:  # noqa: BLE001 - a record that cannot be served is a miss: check
            served = None
    if served is not None:
        return served
    return run_main(PROG, _run, args)


def console() -> None:
    """The console script: `main()`, then `fast_exit.exit_process` (no interpreter teardown)."""
    from compiler.cli.fast_exit import exit_process

    exit_process(main())


if __name__ == "__main__":
    console()
