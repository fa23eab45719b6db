"""`prover zoo MANIFEST|DIR`: check a model zoo on Dask distributed, one aggregated report
(`compiler.zoo`); and the `--baseline` option it shares with `prover check`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from compiler.cli.common import (
    UsageError,
    add_indent_option,
    add_reference_option,
    add_run_options,
    add_schedule_strategy_option,
    add_synthesis_option,
    parse_policy,
    positive_float,
    positive_int,
)
from compiler.cli.outputs import write_output

FORMATS = ("text", "json", "markdown", "html")
BASELINE_HELP = (
    "a previous JSON report (prover check or prover zoo --format json): list every change "
    "against it (proven -> refuted/unknown, fused -> host, new/removed site, NPU share down, "
    "check time more than doubled) and exit 6 when something got worse"
)
ZOO_EPILOG = """examples:
  prover zoo models/                           every *.onnx under models/, the defaults
  prover zoo zoo.toml --workers 2 --format markdown -o zoo.md
                                               a manifest's models x targets x policies
  prover zoo models/ --baseline old.json       exit 6 when something got worse

{reference profiles}
exit codes (over the whole zoo):
  0  every task checked, every site decided, none refuted
  1  a site refuted somewhere
  2  bad usage, a bad manifest or baseline, or a model that could not be checked
  3  a site unknown, or a task that died or timed out twice (never a pass)
  4  internal error
  5  read-only proof gate (--proofs-mode ro): an obligation without a trusted record
  6  --baseline: something got worse (listed, with the model and site)
  7  a model's compute runs in float (not quantized) under --require-quantized or
     --proofs-mode ro
"""


def add_baseline_option(p: Any) -> None:
    p.add_argument("--baseline", metavar="FILE", default=None, help=BASELINE_HELP)


def add_zoo_parser(sub: Any) -> None:
    """The `zoo` subcommand's arguments."""
    z = sub.add_parser(
        "zoo",
        help="check a model zoo (manifest or directory) on Dask distributed",
        description="Check many models x targets x policies x references on Dask distributed "
        "(an embedded LocalCluster, or --scheduler): each model's obligations are collected "
        "by canonical hash, each distinct one is decided once on the workers, each model's "
        "verdicts are assembled from the answers; one aggregated report.",
        epilog=ZOO_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    z.add_argument(
        "source",
        metavar="MANIFEST|DIR",
        help="a TOML/YAML manifest (models with targets, policies, references; globs "
        "relative to it), or a directory: every *.onnx under it with the defaults",
    )
    cl = z.add_argument_group("cluster")
    cl.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="workers of the embedded LocalCluster (default: the CPU count)",
    )
    cl.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="use an existing Dask cluster (e.g. tcp://host:8786) instead of a LocalCluster",
    )
    cl.add_argument(
        "--processes",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="LocalCluster workers are processes (default); --no-processes runs them as "
        "threads of this process (quick start for small zoos)",
    )
    cl.add_argument(
        "--task-timeout",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="wall time of one task (model x target x policy x reference) before it is "
        "retried once, then reported unknown (default: none; --timeout bounds each obligation)",
    )
    m = z.add_argument_group("what is checked (defaults for the manifest's models)")
    m.add_argument(
        "--policy",
        type=parse_policy,
        action="append",
        default=None,
        metavar="bitwise|bounded:N",
        help="default policy of models whose manifest entry names none (repeatable; "
        "default bitwise)",
    )
    m.add_argument(
        "--target",
        action="append",
        default=None,
        metavar="FILE",
        help="default target (TOML or shipped name; repeatable; default: the default target)",
    )
    add_reference_option(m)
    add_synthesis_option(m)
    add_schedule_strategy_option(m)
    o = z.add_argument_group("report and outputs")
    add_baseline_option(o)
    o.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="report format (default: from -o's extension, else text; markdown: a "
        "pull-request comment; html: a self-contained dashboard)",
    )
    add_indent_option(o, "JSON")
    o.add_argument("-o", "--output", metavar="FILE", help="write the report here (default stdout)")
    add_run_options(z)


def zoo(args: argparse.Namespace) -> int:
    """Run `prover zoo`; returns the exit code."""
    from compiler.cli.check_run import check_solver, open_store
    from compiler.zoo import baseline as base
    from compiler.zoo import manifest, report
    from compiler.zoo.run import require_distributed, run_zoo
    from compiler.zoo.task import RunSettings

    if args.indent is not None and args.format != "json":
        raise UsageError(f"--indent applies to --format json, not {args.format}")
    if args.scheduler is not None and args.workers is not None:
        raise UsageError("--workers sizes the embedded LocalCluster; not with --scheduler")
    require_distributed()
    check_solver(args.solver)
    open_store(args.proofs, args.proofs_mode, args.proof_key_file, args.recheck_budget)
    defaults = manifest.Defaults(
        targets=tuple(_path_or_name(t) for t in args.target) if args.target else (None,),
        policies=tuple(str(p) for p in args.policy) if args.policy else ("bitwise",),
        references=(args.reference or "onnx",),
    )
    specs = manifest.load(args.source, defaults)
    old = base.load(args.baseline) if args.baseline else None
    settings = RunSettings(
        proofs=args.proofs,
        proofs_mode=args.proofs_mode,
        proof_key_file=args.proof_key_file,
        recheck_budget_s=args.recheck_budget,
        timeout_s=args.timeout,
        solver=args.solver,
        synthesis=args.synthesize,
        schedule_strategy=args.schedule_strategy,
        require_quantized=args.require_quantized,
    )
    run = run_zoo(
        specs,
        settings,
        workers=args.workers or os.cpu_count() or 1,
        scheduler=args.scheduler,
        processes=args.processes,
        task_timeout_s=args.task_timeout,
    )
    changes: list[base.Change] = []
    if old is not None:
        new = {o.spec.key: _view(o) for o in run.outcomes}
        changes = base.compare(old, new)
    data = report.zoo_json(run, changes, args.baseline)
    if args.format == "json":
        text = report.render_json(data, args.indent)
    elif args.format == "markdown":
        text = report.render_markdown(data)
    elif args.format == "html":
        text = report.render_html(data)
    else:
        text = report.render_text(data)
    write_output(text, args.output, "prover", f"{args.format} zoo report")
    for c in base.worse(changes):
        print(f"prover: {c.line()}", file=sys.stderr)
    return int(data["summary"]["exit_code"])


def _path_or_name(spec: str) -> str:
    """A --target file as an absolute path (workers may run elsewhere), a name as given."""
    p = Path(spec)
    return str(p.absolute()) if p.exists() else spec


def _view(o: Any) -> Any:
    from compiler.zoo.baseline import TaskView

    return TaskView(o.status, o.result.get("report"), o.result.get("reason", ""))


def check_against_baseline(path: str, old: Any, report: Any) -> list[Any]:
    """`prover check --baseline`: the changes of this check's report (`Report`) against the
    baseline `old` (`baseline.load(path)`, read before the check), stored into
    `report.baseline` and printed on stderr."""
    from compiler.report.json_form import report_json
    from compiler.zoo import baseline as base

    data = report_json(report)
    new = {base.check_key(data): base.TaskView("checked", data)}
    changes = base.compare(old, new, partial=True)
    report.baseline = {"file": path, "changes": [c.to_json() for c in changes]}
    for c in changes:
        print(f"prover: baseline: {c.line()}", file=sys.stderr)
    return changes
