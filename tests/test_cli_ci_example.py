"""The shipped CI examples work: the GitHub Actions job and action, GitLab CI, the pre-commit hook.

Every `prover` command in them is a valid invocation of the real argument parser (with the
workflow's variables expanded), the gate loop checks every model even when one fails and
keeps its reports, and the gate commands pass against the committed proof store.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from cli_helpers import EXAMPLES, REPO, prover, run_cli

from compiler.cli.check_files import split, worst
from compiler.cli.prover import build_parser

yaml = pytest.importorskip("yaml")
GITHUB = EXAMPLES / "ci" / "prover-gate.yml"
GITLAB = EXAMPLES / "ci" / "gitlab-ci.yml"
HOOKS = REPO / ".pre-commit-hooks.yaml"
ACTION = REPO / "action.yml"
ACTION_MODELS = "examples/matmul_sigmoid.onnx examples/double_activation.onnx"  # a caller's
SHELL_ENDS = ("||", "&&", ">>", ">", "|", ";")


def _github() -> dict:
    return yaml.safe_load(GITHUB.read_text())


def _gitlab() -> dict:
    return yaml.safe_load(GITLAB.read_text())


def _action() -> tuple[dict, dict[str, str]]:
    """The action and the variables its gate step sees (its inputs' defaults, a caller's models)."""
    action = yaml.safe_load(ACTION.read_text())
    env = {"GATE_MODELS": ACTION_MODELS, "GATE_OPTIONS": action["inputs"]["options"]["default"]}
    return action, env


def _scripts() -> list[tuple[str, dict[str, str]]]:
    """(script text, its variables) of every GitHub step, action step and GitLab job."""
    gh = _github()
    out = [(s.get("run", ""), gh["env"]) for job in gh["jobs"].values() for s in job["steps"]]
    action, env = _action()
    out += [(s.get("run", ""), env) for s in action["runs"]["steps"]]
    gl = _gitlab()
    for job in gl.values():
        if isinstance(job, dict) and "script" in job:
            out += [(line, gl["variables"]) for line in job["script"]]
    return out


def _expand(words: list[str], env: dict[str, str]) -> list[list[str]]:
    """The argument lists a command line stands for: `$GATE_OPTIONS` split into words,
    `$model` each of `$GATE_MODELS` (`$name` its stem), `$baseline` absent or a baseline."""
    models = env.get("GATE_MODELS", "").split() or ["examples/matmul_sigmoid.onnx"]
    variants = []
    for model in models:
        for baseline in ([], ["--baseline", "baseline/zoo.json"]):
            args: list[str] = []
            for w in words:
                if w == "$GATE_OPTIONS":
                    args += shlex.split(env["GATE_OPTIONS"])
                elif w == "$baseline":
                    args += baseline
                else:
                    args.append(w.replace("$model", model).replace("$name", Path(model).stem))
            if args not in variants:
                variants.append(args)
    return variants


def prover_commands() -> list[list[str]]:
    """Every `prover ...` command of the examples, expanded, without `prover` itself."""
    cmds = []
    for script, env in _scripts():
        for line in script.replace("\\\n", " ").splitlines():
            words = shlex.split(line)
            if not words or words[0] != "prover":
                continue
            cut = next((k for k, w in enumerate(words) if w in SHELL_ENDS), len(words))
            for args in _expand(words[1:cut], env):
                if args not in cmds:
                    cmds.append(args)
    return cmds


def test_examples_parse_and_cover_both_gates():
    cmds = prover_commands()
    assert {c[0] for c in cmds} == {"check", "zoo"}
    formats = {c[c.index("--format") + 1] for c in cmds if c[0] == "check"}
    assert formats == {"github", "junit"}
    also = {Path(c[k + 1]).suffix for c in cmds for k, w in enumerate(c) if w == "--also-write"}
    assert also == {".sarif", ".md"}  # SARIF and the summary from the same check
    assert all(c[c.index("--proofs-mode") + 1] == "ro" for c in cmds)


@pytest.mark.parametrize("args", prover_commands(), ids=" ".join)
def test_every_command_is_a_valid_invocation(args):
    """The real parser accepts it (argparse exits 2 on anything it does not know)."""
    parsed = build_parser().parse_args(args)
    assert parsed.command == args[0]


def test_github_job_caches_pip_keeps_sarif_and_writes_the_summary():
    jobs = _github()["jobs"]
    steps = jobs["gate"]["steps"]
    pythons = [s for j in jobs.values() for s in j["steps"] if "setup-python" in s.get("uses", "")]
    assert pythons and all(s["with"]["cache"] == "pip" for s in pythons)
    install = next(s["run"] for s in steps if s.get("name", "").startswith("Install"))
    assert install == 'pip install -e ".[gate]"'  # not the test extra
    upload = next(s for s in steps if "upload-sarif" in s.get("uses", ""))
    assert "!cancelled()" in upload["if"] and upload["with"]["sarif_file"] == "sarif"
    gate = next(s["run"] for s in steps if s.get("name", "").startswith("Proof gate"))
    assert "set -e" not in gate and "--format github" in gate and "GITHUB_STEP_SUMMARY" in gate
    after_gate = steps[steps.index(next(s for s in steps if s.get("run") == gate)) + 1 :]
    assert all("!cancelled()" in s.get("if", "") for s in after_gate)  # run when the gate fails


def test_action_is_composite_and_uploads_sarif_whatever_the_outcome():
    action, _ = _action()
    assert action["runs"]["using"] == "composite" and action["inputs"]["models"]["required"]
    steps = action["runs"]["steps"]
    assert all(s.get("shell") == "bash" for s in steps if "run" in s)  # composite runs need it
    upload = next(s for s in steps if "upload-sarif" in s.get("uses", ""))
    assert "!cancelled()" in upload["if"] and upload["with"]["sarif_file"] == "sarif"
    gh_gate = next(
        s["run"] for s in _github()["jobs"]["gate"]["steps"] if "for model" in s.get("run", "")
    )
    act_gate = next(s["run"] for s in steps if "for model" in s.get("run", ""))
    assert act_gate == gh_gate  # one loop, in the example job and in the action


def test_gitlab_job_keeps_junit_reports_always():
    job = _gitlab()["prover-gate"]
    assert job["artifacts"]["when"] == "always"
    assert job["artifacts"]["reports"]["junit"] == "junit/*.xml"
    assert _gitlab()["default"]["cache"]["paths"] == [".cache/pip"]


def _gate_loops() -> list[tuple[str, str, dict[str, str]]]:
    gh, gl = _github(), _gitlab()
    gh_gate = next(s["run"] for s in gh["jobs"]["gate"]["steps"] if "for model" in s.get("run", ""))
    gl_gate = "\n".join(gl["prover-gate"]["script"])  # one shell runs a job's lines
    action, env = _action()
    act_gate = next(s["run"] for s in action["runs"]["steps"] if "for model" in s.get("run", ""))
    return [
        ("github", gh_gate, gh["env"]),
        ("gitlab", gl_gate, gl["variables"]),
        ("action", act_gate, env),
    ]


@pytest.mark.parametrize("which,script,env", _gate_loops(), ids=["github", "gitlab", "action"])
def test_gate_loop_checks_every_model_when_one_fails(which, script, env, tmp_path):
    """Under the CI shell's `-eo pipefail`, with a `prover` that fails on the second model:
    every model is still checked in every format, and the step fails."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "prover"
    shim.write_text(
        "#!/bin/sh\n"
        'echo "$*" >> "$PROVER_LOG"\n'
        'prev=""; for a in "$@"; do case "$prev" in -o|--also-write) mkdir -p "$(dirname "$a")"; '
        'echo "report of $2" > "$a";; esac; prev="$a"; done\n'
        'echo "report of $2"\n'
        '[ "$2" = "$FAIL_MODEL" ] && exit 1\n'
        "exit 0\n"
    )
    shim.chmod(0o755)
    models = env["GATE_MODELS"].split()
    run_env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PROVER_LOG=str(tmp_path / "log"),
                   GITHUB_STEP_SUMMARY=str(tmp_path / "summary.md"), GATE_MODELS=env["GATE_MODELS"],
                   GATE_OPTIONS=env["GATE_OPTIONS"], FAIL_MODEL=models[1])  # fmt: skip
    r = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    log = (tmp_path / "log").read_text().splitlines()
    per_model = 1  # one check per model writes every report
    assert len(log) == per_model * len(models)
    assert [line.split()[1] for line in log[::per_model]] == models
    kept = sorted(p.name for p in tmp_path.glob("*/*") if p.parent.name in ("sarif", "junit"))
    ext = "xml" if which == "gitlab" else "sarif"
    assert kept == sorted(f"{Path(m).stem}.{ext}" for m in models)
    if which != "gitlab":
        summary = (tmp_path / "summary.md").read_text()
        assert [line.split()[-1] for line in summary.splitlines()] == models  # in order


def _real_gate_commands(fmt: str) -> list[list[str]]:
    return [c for c in prover_commands() if c[0] == "check" and c[c.index("--format") + 1] == fmt]


@pytest.mark.parametrize("cmd", _real_gate_commands("github"), ids=lambda c: c[1])
def test_gate_command_passes_on_the_committed_store(cmd, tmp_path):
    """The gate's command passes; the reports it also writes go to a temporary directory,
    never into the repository (`_outside_repo`)."""
    r = prover(*_outside_repo(cmd, tmp_path), cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not re.search(r"^::error", r.stdout, re.M)


def _outside_repo(cmd: list[str], tmp_path: Path) -> list[str]:
    """`cmd` with each file it writes (-o, --also-write) moved under `tmp_path`."""
    return [str(tmp_path / a) if prev in ("-o", "--also-write") else a
            for prev, a in zip(["", *cmd], cmd, strict=False)]  # fmt: skip


def test_sarif_and_junit_reports_are_written(tmp_path):
    """The GitHub gate's one check prints the annotations and writes the SARIF report and
    the Markdown summary; GitLab's writes JUnit."""
    github = _real_gate_commands("github")[0]
    junit = _real_gate_commands("junit")[0]
    r = prover(*_outside_repo(github, tmp_path), cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert not re.search(r"^::error", r.stdout, re.M) and "wrote" in r.stderr
    k = junit.index("-o")
    r = prover(*junit[: k + 1], str(tmp_path / "r.xml"), *junit[k + 2 :], cwd=REPO)
    assert r.returncode == 0, r.stderr
    stem = Path(github[1]).stem
    assert '"version": "2.1.0"' in (tmp_path / "sarif" / f"{stem}.sarif").read_text()
    assert (tmp_path / "summary" / f"{stem}.md").read_text().startswith("#")
    assert (tmp_path / "r.xml").read_text().startswith("<?xml")


def zoo_commands() -> list[list[str]]:
    """The GitHub zoo step's commands (`$baseline` left out: a first run)."""
    return [c for c in prover_commands() if c[0] == "zoo" and "--baseline" not in c][:2]


def test_zoo_gate_runs_on_the_committed_store_and_against_its_own_baseline(tmp_path):
    """The zoo step's commands pass read-only on the committed store, first without a
    baseline (a first run), then against the report the first run wrote."""
    cmds = zoo_commands()
    assert len(cmds) == 2 and all(c[c.index("--proofs-mode") + 1] == "ro" for c in cmds)
    json_cmd = next(c for c in cmds if "json" in c)
    out = tmp_path / "zoo.json"

    def run(baseline: list[str]) -> int:
        args = [str(out) if a == "zoo.json" else a for a in json_cmd]
        args += ["--no-processes", *baseline]
        return prover(*args, cwd=REPO).returncode

    assert run([]) == 0 and out.is_file()
    base = tmp_path / "main-zoo.json"
    base.write_bytes(out.read_bytes())
    assert run(["--baseline", str(base)]) == 0


# The pre-commit hook


def _hook() -> dict:
    hooks = yaml.safe_load(HOOKS.read_text())
    assert isinstance(hooks, list) and [h["id"] for h in hooks] == ["prover-check"]
    return hooks[0]


def test_hook_definition_is_complete_and_valid():
    hook = _hook()
    assert {"id", "name", "entry", "language"} <= set(hook)
    assert hook["language"] == "python"
    assert re.search(hook["files"], "models/net.onnx") and not re.search(hook["files"], "a.py")
    entry = shlex.split(hook["entry"])
    assert entry[:2] == ["python", "-m"] and entry[2] == "compiler.cli.check_files"
    build_parser().parse_args(["check", "m.onnx", *hook["args"]])  # its args are check options


def test_hook_checks_every_changed_model_and_fails_on_the_worst():
    """As pre-commit runs it: the hook's args, then the changed files."""
    hook = _hook()
    module = shlex.split(hook["entry"])[2].removeprefix("compiler.")
    files = ["examples/matmul_sigmoid.onnx", "examples/showcase.onnx", "examples/multi_user.onnx"]
    r = run_cli(module, *hook["args"], *files, cwd=REPO)
    assert r.returncode == 1, r.stderr  # the showcase has a refuted site
    assert [f for f in files if f"{f}: policy bitwise" in r.stdout] == files  # all checked
    assert r.stderr.strip().splitlines()[-1] == (
        "prover-check-files: 1 of 3 models failed: examples/showcase.onnx (exit 1)"
    )
    ok = run_cli(module, *hook["args"], files[0], files[2], cwd=REPO)
    assert ok.returncode == 0, ok.stderr


def test_hook_argument_split_and_worst_exit_code():
    assert split(["--policy", "bitwise", "a.onnx", "B.ONNX"]) == (
        ["--policy", "bitwise"], ["a.onnx", "B.ONNX"],
    )  # fmt: skip
    assert split(["--target", "t.toml"]) == (["--target", "t.toml"], [])
    assert worst([0, 3, 1, 0]) == 1 and worst([3, 5]) == 5 and worst([0, 6, 1]) == 6
    assert worst([0, 0]) == 0 and worst([0, 130]) == 130
