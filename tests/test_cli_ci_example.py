"""The documented CI job works: its gate commands pass against the committed proof store."""

from __future__ import annotations

import shlex

import pytest
from cli_helpers import EXAMPLES, REPO, prover

yaml = pytest.importorskip("yaml")
WORKFLOW = EXAMPLES / "ci" / "prover-gate.yml"


def gate_commands() -> list[list[str]]:
    """Every `prover check` command of the workflow, with the shell loop expanded."""
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["gate"]["steps"]
    cmds = []
    for step in steps:
        script = step.get("run", "").replace("\\\n", " ")
        models = []
        for line in script.splitlines():
            words = shlex.split(line)
            if words[:1] == ["for"]:
                models = words[3 : words.index("do")] if "do" in words else words[3:]
                models = [m.rstrip(";") for m in models]
            if words[:2] == ["prover", "check"]:
                if words[2] == "$model":
                    cmds += [["check", m, *words[3:]] for m in models]
                else:
                    cmds.append(words[1:])
    return cmds


def test_workflow_uploads_sarif_and_uses_ro_store():
    wf = yaml.safe_load(WORKFLOW.read_text())
    steps = wf["jobs"]["gate"]["steps"]
    uploads = [
        s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif")
    ]
    assert uploads and uploads[0]["with"]["sarif_file"] == "prover.sarif"
    cmds = gate_commands()
    assert len(cmds) >= 5
    assert all("--proofs-mode" in c and c[c.index("--proofs-mode") + 1] == "ro" for c in cmds)


@pytest.mark.parametrize("cmd", gate_commands(), ids=lambda c: c[1])
def test_gate_command_passes_on_the_committed_store(cmd, tmp_path):
    cmd = [str(tmp_path / "prover.sarif") if a == "prover.sarif" else a for a in cmd]
    r = prover(*cmd, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr


def zoo_commands() -> list[list[str]]:
    """Every `prover zoo` command of the workflow (`$baseline` left as a word)."""
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["gate"]["steps"]
    cmds = []
    for step in steps:
        script = step.get("run", "").replace("\\\n", " ")
        for line in script.splitlines():
            words = shlex.split(line.split("||")[0])
            if words[:2] == ["prover", "zoo"]:
                cmds.append(words[1:])
    return cmds


def test_zoo_gate_runs_on_the_committed_store_and_against_its_own_baseline(tmp_path):
    """The zoo step's commands pass read-only on the committed store, first without a
    baseline (a first run), then against the report the first run wrote."""
    cmds = zoo_commands()
    assert len(cmds) == 2 and all(c[c.index("--proofs-mode") + 1] == "ro" for c in cmds)
    json_cmd = next(c for c in cmds if "json" in c)
    out = tmp_path / "zoo.json"

    def run(baseline: list[str]) -> int:
        args = [a for a in json_cmd if a != "$baseline"]
        args = [str(out) if a == "zoo.json" else a for a in args]
        args += ["--no-processes", *baseline]
        return prover(*args, cwd=REPO).returncode

    assert run([]) == 0 and out.is_file()
    first = out.read_bytes()
    base = tmp_path / "main-zoo.json"
    base.write_bytes(first)
    assert run(["--baseline", str(base)]) == 0
