"""`--baseline PREVIOUS.json`: every change of a check or zoo report against a previous one.

A baseline is the JSON report of an earlier run, as `prover check --format json` or
`prover zoo --format json` wrote it (either kind on either command: a check report is a
zoo of one task). Tasks match by (model, target, policy, reference); sites by pattern and
ONNX nodes. What counts as worse (exit 6, `ExitCode.WORSE`):

- `verdict`: a site that was proven is now refuted, unknown or rejected (fused -> not);
- `host`: an ONNX node that ran on the NPU now runs on the host;
- `removed_site`: a proven site is no longer a candidate;
- `npu_share`: the NPU's share of the model's multiply-accumulates went down;
- `time`: the check took more than twice as long (and at least `TIME_FLOOR_MS` more:
  below that, a loaded machine's noise);
- `task`: a task that was checked now failed (bad model, dead worker) or a task is gone.

Other changes (a site proven now, a new site or task, faster) are listed as not worse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.cli.common import UsageError
from prover.verdict import Status

TIME_FLOOR_MS = 1000.0
TaskKey = tuple[str, str, str, str]  # (model, target, policy, reference)


@dataclass(frozen=True)
class Change:
    """One difference against the baseline: `kind` (a stable code), whether it is `worse`,
    `where` (model / target / policy / reference, and the site), and a one-line `message`."""

    kind: str
    worse: bool
    where: str
    message: str
    before: Any = None
    after: Any = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "worse": self.worse,
            "where": self.where,
            "message": self.message,
        }
        if self.before is not None:
            out["before"] = self.before
        if self.after is not None:
            out["after"] = self.after
        return out

    def line(self) -> str:
        return f"{'WORSE' if self.worse else 'change'}: {self.where}: {self.message}"


@dataclass
class TaskView:
    """What a baseline comparison reads of one task: its check report, or why it has none."""

    status: str  # "checked" | "error" | "unknown"
    report: dict[str, Any] | None
    reason: str = ""


def load(path: str) -> dict[TaskKey, TaskView]:
    """The tasks of a baseline file (`UsageError`, exit 2, if it is not a report)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"baseline not found: {path}") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"baseline {path} is not a JSON report: {e}") from None
    try:
        return tasks_of(data)
    except (KeyError, TypeError, AttributeError) as e:
        raise UsageError(f"baseline {path} is not a check or zoo JSON report ({e})") from None


def tasks_of(data: Any) -> dict[TaskKey, TaskView]:
    """Tasks of a zoo report, or the one task of a check report."""
    if not isinstance(data, dict):
        raise TypeError("not a JSON object")
    if data.get("kind") == "zoo":
        out = {}
        for t in data["tasks"]:
            key = (t["model"], t["target"], t["policy"], t["reference"])
            out[key] = TaskView(t["status"], t.get("report"), t.get("reason", ""))
        return out
    for k in ("model", "target", "policy", "sites"):
        if k not in data:
            raise KeyError(k)
    return {check_key(data): TaskView("checked", data)}


def check_key(report: dict[str, Any]) -> TaskKey:
    ref = report.get("reference") or {}
    return (str(report["model"]), str(report["target"]), str(report["policy"]), ref.get("name", ""))


def compare(
    old: dict[TaskKey, TaskView], new: dict[TaskKey, TaskView], partial: bool = False
) -> list[Change]:
    """Every change from `old` to `new`, task by task in `new`'s order, then removed tasks
    (not with `partial`: `new` checks only some of the baseline's tasks, as one `prover
    check` against a zoo report does). A single task on each side is compared whatever its
    key (a `prover check` run of a model renamed or moved is still that model)."""
    if len(old) == 1 and len(new) == 1:
        o, (kn, n) = next(iter(old.values())), next(iter(new.items()))
        return compare_task(_where(kn), o, n)
    if partial:
        new = {_match(k, old): v for k, v in new.items()}
    out: list[Change] = []
    for key, n in new.items():
        if key in old:
            out += compare_task(_where(key), old[key], n)
        else:
            out.append(Change("new_task", False, _where(key), "not in the baseline"))
    for key in old:
        if key not in new and not partial:
            out.append(
                Change("removed_task", True, _where(key), "in the baseline, not checked now")
            )
    return out


def _match(key: TaskKey, old: dict[TaskKey, TaskView]) -> TaskKey:
    """The baseline task `key` stands for: the same key, else the one task with the same
    model file name, target, policy and reference (a path given another way)."""
    if key in old:
        return key
    name = Path(key[0]).name
    hits = [k for k in old if Path(k[0]).name == name and k[1:] == key[1:]]
    return hits[0] if len(hits) == 1 else key


def _where(key: TaskKey) -> str:
    model, target, policy, ref = key
    return f"{model} [{target}, {policy}, {ref}]" if ref else f"{model} [{target}, {policy}]"


def compare_task(where: str, old: TaskView, new: TaskView) -> list[Change]:
    """The changes of one task (see the module docstring)."""
    if old.report is None or new.report is None:
        if old.status == new.status:
            return []
        worse = old.status == "checked"
        why = f" ({new.reason})" if new.reason else ""
        return [Change("task", worse, where, f"was {old.status}, now {new.status}{why}")]
    return (
        _sites(where, old.report, new.report)
        + _host(where, old.report, new.report)
        + _share(where, old.report, new.report)
        + _time(where, old.report, new.report)
    )


def _site_key(s: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    return (str(s["pattern"]), tuple(s["nodes"]))


def _site_where(where: str, s: dict[str, Any]) -> str:
    return f"{where} {s['id']} {s['pattern']} ({','.join(s['nodes'])})"


def _sites(where: str, old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    before = {_site_key(s): s for s in old["sites"]}
    after = {_site_key(s): s for s in new["sites"]}
    out = []
    for k, s in after.items():
        o = before.get(k)
        w = _site_where(where, s)
        if o is None:
            out.append(Change("new_site", False, w, f"new candidate, {s['verdict']}"))
            continue
        if o["verdict"] != s["verdict"]:
            worse = o["verdict"] == Status.PROVEN
            reason = s.get("reason", {}).get("code")
            why = f" [{reason}]" if reason and reason != s["verdict"] else ""
            out.append(
                Change(
                    "verdict",
                    worse,
                    w,
                    f"{o['verdict']} -> {s['verdict']}{why}",
                    o["verdict"],
                    s["verdict"],
                )
            )
    for k, o in before.items():
        if k not in after:
            worse = o["verdict"] == Status.PROVEN
            msg = f"no longer a candidate (was {o['verdict']})"
            out.append(Change("removed_site", worse, _site_where(where, o), msg))
    return out


def _host_nodes(report: dict[str, Any]) -> set[str]:
    return {n for d in report.get("host_ops", []) for n in d.get("nodes", [])}


def _host(where: str, old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    moved = sorted(_host_nodes(new) - _host_nodes(old))
    back = sorted(_host_nodes(old) - _host_nodes(new))
    out = []
    if moved:
        out.append(Change("host", True, where, f"now on the host: {', '.join(moved)}"))
    if back:
        out.append(Change("host", False, where, f"no longer on the host: {', '.join(back)}"))
    return out


def npu_share(report: dict[str, Any]) -> float | None:
    """The NPU's share of the report's multiply-accumulates (None without MAC counts)."""
    macs = report.get("macs")
    if not macs or not macs.get("total"):
        return None
    return float(macs["npu"]) / float(macs["total"])


def _share(where: str, old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    a, b = npu_share(old), npu_share(new)
    if a is None or b is None or abs(a - b) < 1e-12:
        return []
    msg = f"NPU share of MACs {a:.1%} -> {b:.1%}"
    return [Change("npu_share", b < a, where, msg, round(a, 6), round(b, 6))]


def check_time_ms(report: dict[str, Any]) -> float:
    """A report's check time: the sum of its sites' `time_ms`."""
    return float(sum(s.get("time_ms", 0.0) for s in report["sites"]))


def _time(where: str, old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    a, b = check_time_ms(old), check_time_ms(new)
    if b > 2 * a and b - a >= TIME_FLOOR_MS:
        msg = f"check time {a:.0f} ms -> {b:.0f} ms (more than doubled)"
        return [Change("time", True, where, msg, round(a, 3), round(b, 3))]
    return []


def worse(changes: list[Change]) -> list[Change]:
    return [c for c in changes if c.worse]
