"""`prover zoo`: the zoo of shipped examples on a 2-worker in-process LocalCluster gives the
verdicts and proof hashes of `prover check` run one by one; obligations are shared through
the run's proof store; failed, dying and timed-out tasks are reported per model; the
aggregated report matches its shipped schema."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import jsonschema
import pytest
from cli_helpers import EXAMPLES, assert_one_line_error, prover

from compiler.report.json_form import schema as check_schema
from compiler.zoo import report
from compiler.zoo.manifest import Defaults, load
from compiler.zoo.run import run_zoo
from compiler.zoo.task import RunSettings, run_task

pytest.importorskip("distributed")

# small shipped examples; the last three share one obligation (the sigmoid table of the
# standalone activation), so the zoo decides it once and serves it twice
ZOO = ("matmul_sigmoid", "matmul_requantize_sigmoid", "multi_user", "showcase")


def _zoo_dir(tmp: Path, names=ZOO) -> Path:
    d = tmp / "zoo"
    d.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy(EXAMPLES / f"{n}.onnx", d / f"{n}.onnx")
    return d


@pytest.fixture(scope="module")
def zoo_run(tmp_path_factory):
    d = _zoo_dir(tmp_path_factory.mktemp("zoo"))
    specs = load(str(d), Defaults())
    return d, run_zoo(specs, RunSettings(), workers=2, processes=False)


def _sites(rep: dict) -> list[dict]:
    return [{k: v for k, v in s.items() if k != "time_ms"} for s in rep["sites"]]


def test_zoo_equals_prover_check_of_each_model_alone(zoo_run, tmp_path):
    d, run = zoo_run
    assert [o.spec.label for o in run.outcomes] == sorted(f"{n}.onnx" for n in ZOO)
    for o in run.outcomes:
        assert o.status == "checked" and o.attempts == 1
        out = tmp_path / f"{o.spec.label}.json"
        alone = prover("check", d / o.spec.label, "--format", "json", "-o", out)
        want = json.loads(out.read_text())
        got = o.result["report"]
        assert _sites(got) == _sites(want), o.spec.label  # verdicts, hashes, counterexamples
        assert got["summary"] == want["summary"] and got["macs"] == want["macs"]
        assert o.result["exit_code"] == alone.returncode
    hashes = [s.get("obligation") for o in run.outcomes for s in o.result["report"]["sites"]]
    assert any(hashes)


def test_shared_obligations_are_decided_once(zoo_run):
    _, run = zoo_run
    ob = report.obligation_figures(run)
    assert ob["shared"] >= 1 and ob["distinct"] < ob["occurrences"]
    assert ob["errors"] == 0 and ob["served"] == 0  # no store named: nothing to serve
    # every distinct hash a task relies on was answered by the deciding phase, once
    # (a family of identities is proven where it is built, in the model run: never deferred)
    answers = [(h, a) for o in run.outcomes for h, a in o.result["obligations"].items()]
    relied = {h for h, a in answers if a != "identity"}
    identities = {h for h, a in answers if a == "identity"}
    assert identities and not identities & set(run.answers)
    assert relied <= set(run.answers)
    assert ob["identities"] == len(identities) <= ob["inline"]
    assert ob["decided"] == len(run.answers) == len(relied) + ob["speculative"]
    assert ob["dedup_ratio"] == round(ob["occurrences"] / ob["distinct"], 4)
    # collecting, then assembling (showcase's refuted site lowers its ops apart, whose
    # lowerings are identities: proven in the run, no third run for them)
    assert run.model_runs == 2 * len(run.outcomes)


def test_zoo_report_matches_its_schema_in_every_format(zoo_run):
    _, run = zoo_run
    data = report.zoo_json(run)
    text = report.render_json(data)
    jsonschema.validate(json.loads(text), report.schema())
    check = jsonschema.Draft202012Validator(check_schema())
    for t in data["tasks"]:
        check.validate(t["report"])
    assert data["summary"]["exit_code"] == 1  # showcase has a refuted site
    assert data["summary"]["complete"] is True
    md = report.render_markdown(data)
    assert md.startswith("## Zoo gate: exit 1") and md.count("\n| ") == 1 + len(ZOO)
    txt = report.render_text(data)
    assert "showcase.onnx" in txt and "dedup ratio" in txt


def test_a_corrupt_model_is_reported_per_model_not_a_crash(tmp_path):
    d = _zoo_dir(tmp_path, ("matmul_sigmoid",))
    (d / "broken.onnx").write_bytes((EXAMPLES / "matmul_sigmoid.onnx").read_bytes()[:40])
    run = run_zoo(load(str(d), Defaults()), RunSettings(), workers=2, processes=False)
    by = {o.spec.label: o for o in run.outcomes}
    assert by["matmul_sigmoid.onnx"].status == "checked"
    bad = by["broken.onnx"]
    assert bad.status == "error" and "broken.onnx" in bad.result["reason"]
    data = report.zoo_json(run)
    jsonschema.validate(data, report.schema())
    assert data["summary"]["exit_code"] == 2 and data["summary"]["complete"] is False


# --- retried once, then unknown --------------------------------------------------------


def flaky_task(spec, settings, *phase):
    """Fails the first time it runs for a model (a marker file beside it), then checks."""
    marker = Path(spec.model + ".failed-once")
    if not marker.exists():
        marker.write_text("x")
        raise RuntimeError("injected failure")
    return run_task(spec, settings, *phase)


def failing_task(spec, settings, *phase):
    raise RuntimeError("injected failure")


def slow_task(spec, settings, *phase):
    time.sleep(1.5)
    return run_task(spec, settings, *phase)


def test_a_failed_task_is_retried_once_and_then_checked(tmp_path):
    d = _zoo_dir(tmp_path, ("matmul_sigmoid",))
    run = run_zoo(
        load(str(d), Defaults()), RunSettings(), workers=1, processes=False, task=flaky_task
    )
    (o,) = run.outcomes
    assert o.status == "checked" and o.attempts == 2 and o.result["exit_code"] == 0


def test_a_task_failing_twice_is_unknown_with_its_reason(tmp_path):
    d = _zoo_dir(tmp_path, ("matmul_sigmoid",))
    run = run_zoo(
        load(str(d), Defaults()), RunSettings(), workers=1, processes=False, task=failing_task
    )
    (o,) = run.outcomes
    assert o.status == "unknown" and o.attempts == 2
    assert "injected failure" in o.result["reason"] and "tried 2" in o.result["reason"]
    data = report.zoo_json(run)
    jsonschema.validate(data, report.schema())
    assert data["summary"]["exit_code"] == 3 and data["summary"]["complete"] is False


def test_a_task_past_its_timeout_is_unknown_never_a_pass(tmp_path):
    d = _zoo_dir(tmp_path, ("matmul_sigmoid",))
    t0 = time.monotonic()
    run = run_zoo(
        load(str(d), Defaults()),
        RunSettings(),
        workers=2,
        processes=False,
        task_timeout_s=0.3,
        task=slow_task,
    )
    (o,) = run.outcomes
    assert o.status == "unknown" and "timed out after 0.3 s" in o.result["reason"]
    assert time.monotonic() - t0 < 5  # not waiting for the stuck attempts
    assert report.zoo_json(run)["summary"]["exit_code"] == 3


# --- the command line ------------------------------------------------------------------


def test_cli_zoo_json_and_exit_code(tmp_path):
    d = _zoo_dir(tmp_path, ("matmul_sigmoid", "multi_user"))
    out = tmp_path / "zoo.json"
    r = prover("zoo", d, "--workers", "2", "--no-processes", "--format", "json", "-o", out)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    jsonschema.validate(data, report.schema())
    assert [t["model"] for t in data["tasks"]] == ["matmul_sigmoid.onnx", "multi_user.onnx"]
    assert data["engine"]["scheduler"] == "local" and data["engine"]["workers"] == 2


def test_cli_zoo_without_distributed_is_a_one_line_install_hint(monkeypatch):
    import sys

    from compiler.cli.common import UsageError
    from compiler.zoo.run import require_distributed

    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(UsageError, match=r"pip install 'npu-fusion-prover\[gate\]'"):
        require_distributed()


def test_cli_zoo_bad_source_exit_2(tmp_path):
    r = prover("zoo", tmp_path / "nowhere.toml", "--no-processes")
    assert_one_line_error(r, "zoo manifest or directory not found")


def dying_task(spec, settings, *phase):
    """Kills its worker process for multi_user.onnx (as a crash or the OOM killer would)."""
    import os

    if "multi_user" in spec.model:
        os._exit(1)
    return run_task(spec, settings, *phase)


def hanging_task(spec, settings, *phase):
    if "multi_user" in spec.model:
        time.sleep(120)
    return run_task(spec, settings, *phase)


@pytest.mark.slow
def test_process_workers_that_die_or_hang_are_retried_once_then_unknown(tmp_path):
    """The process cluster of `prover zoo`: a worker killed under a task, and a task past
    --task-timeout (its worker restarted), are retried once, then reported unknown; the
    other model is checked. (Process workers start slowly: the timeout leaves room.)"""
    d = _zoo_dir(tmp_path, ("matmul_sigmoid", "multi_user"))
    specs = load(str(d), Defaults())
    for task, timeout, why in (
        (dying_task, None, "its worker died while running it; tried 2 time(s)"),
        (hanging_task, 30.0, "timed out after 30 s (--task-timeout); tried 2 time(s)"),
    ):
        run = run_zoo(specs, RunSettings(), workers=2, task_timeout_s=timeout, task=task)
        by = {o.spec.label: o for o in run.outcomes}
        assert by["matmul_sigmoid.onnx"].status == "checked"
        assert by["multi_user.onnx"].status == "unknown"
        assert by["multi_user.onnx"].result["reason"] == why
        assert report.zoo_json(run)["summary"]["exit_code"] == 3


def test_require_quantized_fails_the_zoo_on_a_float_model(tmp_path):
    """`--require-quantized` reaches every task, and a task's exit 7 fails the zoo (it
    was dropped on the way and the zoo passed)."""
    d = tmp_path / "zoo"
    d.mkdir()
    shutil.copy(EXAMPLES / "digits" / "digits_matmul_float.onnx", d)
    specs = load(str(d), Defaults())
    loud = run_zoo(specs, RunSettings(), workers=1, processes=False)
    assert report.zoo_exit_code(loud, []) == 0
    gate = run_zoo(specs, RunSettings(require_quantized=True), workers=1, processes=False)
    assert report.zoo_exit_code(gate, []) == 7
    r = prover("zoo", str(d), "--no-processes", "--workers", "1", "--require-quantized")
    assert r.returncode == 7, r.stdout + r.stderr


# --- the phases: collect without deciding, decide once, assemble ------------------------


def test_a_collecting_run_decides_nothing_and_known_answers_give_the_check(tmp_path):
    """A model run with `collect` defers every obligation undecided; run again with the
    answers decided apart (as the zoo's deciding phase does), it gives `prover check`'s
    sites; showcase's refuted site asks for more (its ops lowered apart) on the way."""
    from compiler.proving import prove
    from compiler.zoo.decide import decide_chunk

    (spec,) = load(str(_zoo_dir(tmp_path, ("showcase",))), Defaults())
    alone = run_task(spec, RunSettings())
    known: dict = {}
    decided = prove.COUNTS["decided"]
    for _ in range(3):
        r = run_task(spec, RunSettings(), known, True)
        if r["status"] != "pending":
            break
        assert prove.COUNTS["decided"] == decided  # collecting decides nothing
        assert not set(r["needs"]) & set(known)
        known |= decide_chunk(list(r["needs"].values()), RunSettings())
    assert r["status"] == "checked" and _sites(r["report"]) == _sites(alone["report"])
    assert set(r["obligations"]) == set(alone["obligations"])
    assert {h for h, a in r["obligations"].items() if a != "identity"} <= set(known)


def test_an_obligation_whose_decision_fails_twice_makes_its_models_unknown(tmp_path, monkeypatch):
    """The deciding phase's task fails for one obligation (each time): retried once alone,
    then the models relying on it are unknown with the reason, the others checked."""
    from compiler.zoo import phases
    from compiler.zoo.decide import decide_chunk

    d = _zoo_dir(tmp_path, ("matmul_requantize_sigmoid", "matmul_sigmoid"))
    specs = load(str(d), Defaults())
    answers = run_task(specs[0], RunSettings())["obligations"]
    target = next(h for h, a in answers.items() if a != "identity")  # one the phase decides

    def failing(obs, settings):
        if any(ob.hash == target for ob in obs):
            raise RuntimeError("injected failure")
        return decide_chunk(obs, settings)

    monkeypatch.setattr(phases, "decide_chunk", failing)
    run = run_zoo(specs, RunSettings(), workers=2, processes=False)
    by = {o.spec.label: o for o in run.outcomes}
    bad = by["matmul_requantize_sigmoid.onnx"]
    assert bad.status == "unknown" and bad.result["exit_code"] == 3
    assert bad.result["reason"] == (
        f"obligation {target}: internal error (RuntimeError: injected failure); tried 2 time(s)"
    )
    others = [o for o in run.outcomes if target not in o.result["obligations"]]
    assert others and all(o.status == "checked" for o in others)
    assert report.zoo_json(run)["summary"]["complete"] is False


def test_frontend_cache_is_lru_bounded_by_count_and_bytes():
    from compiler.frontend.cache import FrontendCache

    c = FrontendCache(size=3, max_bytes=100)
    for k in "abc":
        c.put((k,), k, 30)
    assert c.get(("a",)) == "a"  # a is now the most recent: b goes first
    c.put(("d",), "d", 30)  # 120 bytes: over, b evicted
    assert c.get(("b",)) is None and c.get(("c",)) == "c" and c.get(("d",)) == "d"
    c.put(("big",), "x", 101)  # larger than the whole cache: not kept, nothing evicted
    assert c.get(("big",)) is None and c.get(("a",)) == "a"
    c.put(("e",), "e", 1)
    c.put(("f",), "f", 1)  # more items than 3: the least recent (c, then d) go
    assert c.get(("c",)) is None and c.get(("d",)) is None and c.hits == 4
