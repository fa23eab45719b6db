"""`prover check MODEL ...`: prove or refute every candidate fusion site of an ONNX model.

Exit codes: 0 every candidate decided and nothing refuted; 1 at least one refuted;
3 at least one unknown and none refuted; 2 bad usage or bad input; 4 internal error;
5 read-only proof gate: an obligation has no trusted record in the store;
6 --baseline: something got worse than in the baseline report.
`prover zoo MANIFEST|DIR` checks a model zoo on Dask distributed (`compiler.cli.zoo_cmd`).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from compiler.cli.common import (
    PROOFS_HELP,
    Parser,
    UsageError,
    VersionAction,
    add_indent_option,
    add_model_options,
    add_run_options,
    argv_or_default,
    positive_int,
    run_main,
    tool_version,
    warn_float_compute,
    write_output,
)
from compiler.cli.zoo_cmd import add_baseline_option, add_zoo_parser

if TYPE_CHECKING:
    from compiler.report.model import Report

PROG = "prover"
# format -> renderer module (compiler.report.<format>), imported only for the chosen format
RENDERERS = ("text", "json", "sarif", "junit", "markdown")
FORMATS = sorted([*RENDERERS, "html"])  # html is rendered from the whole run (graph, plots)
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


def build_parser() -> argparse.ArgumentParser:
    """The `prover` argument parser (subcommand `check`)."""
    p = Parser(
        prog=PROG,
        description="Formal legality checker for operator fusion in an NPU compiler.",
        epilog=EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action=VersionAction)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    c = sub.add_parser(
        "check",
        help="check every candidate fusion site of an ONNX model",
        description="Prove or refute every candidate fusion site of an ONNX model.",
        epilog=PROOFS_HELP + "\n" + EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_options(c)
    c.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="report format (html: one self-contained file with the graph and plots; needs "
        "the 'report' extra)",
    )
    add_indent_option(c, "JSON")
    c.add_argument("-o", "--output", metavar="FILE", help="write the report here (default stdout)")
    c.add_argument(
        "--emit-tests",
        metavar="DIR",
        help="write a replayable pytest module and .npz data per refuted site",
    )
    add_baseline_option(c)
    add_run_options(c)
    c.add_argument(
        "--result-cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --proofs in rw mode, a signing key and --recheck-budget 0: answer an "
        "unchanged check (same model bytes, options, target file, tool sources, installed "
        "packages, CPU and Python) from its signed run record in the store's runs/ "
        "(local, git-ignored); --no-result-cache always checks",
    )
    c.add_argument(
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
    if args.format == "html":
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
        emit_tests(report, args.model, args.emit_tests, target_file, run.external_data)
    if args.format == "html":
        from compiler.report import html as report_html

        text = report_html.render(run)
    elif args.format == "json":
        from compiler.report import json_form as report_json

        text = report_json.render(report, args.indent)
    else:
        text = importlib.import_module(f"compiler.report.{args.format}").render(report)
    write_output(text, args.output)
    lines = print_store_summary(PROG, run, args.model) + warn_float_compute(PROG, report)
    code = report.exit_code()
    if any(c.worse for c in changes):
        return ExitCode.WORSE  # no run record: its key cannot see the baseline's contents
    if run_record.applies(args) and args.baseline is None:  # records listed only then
        records = relied_on_records(run)
        run_record.save(PROG, args, run.inputs, text, code, lines, records, complete(run), before)
    return code


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
    args = build_parser().parse_args(argv)
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
