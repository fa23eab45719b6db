"""The README stays short and true: its install and test commands are .ci/run's, its sample
is what a real run prints, its commands parse, and every file it names exists."""

from __future__ import annotations

import re
import shlex

import pytest
from cli_helpers import REPO, prover

from compiler.cli.npuc import build_parser as npuc_parser
from compiler.cli.prover import build_parser as prover_parser

README = (REPO / "README.md").read_text()
CI_RUN = (REPO / ".ci" / "run").read_text()
MAX_LINES = 150


def _blocks(lang: str) -> list[str]:
    """The README's fenced blocks opened with ```lang (fences read in order)."""
    blocks, current, opened = [], [], None
    for line in README.splitlines():
        if line.startswith("```"):
            if opened is None:
                opened, current = line[3:].strip(), []
            else:
                if opened == lang:
                    blocks.append("\n".join(current) + "\n")
                opened = None
        elif opened is not None:
            current.append(line)
    return blocks


def _commands() -> list[list[str]]:
    """Every command of the README's bash blocks (comments and `&&` chains split)."""
    out = []
    for block in _blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("#")[0].split("&&"):
                if part.strip():
                    out.append(shlex.split(part))
    return out


def test_readme_is_short():
    assert len(README.splitlines()) <= MAX_LINES


def test_install_and_test_commands_are_those_of_ci_run():
    quick = _blocks("bash")[0]
    install = next(c for c in _commands() if c[:2] == ["pip", "install"])
    assert " ".join(install) in quick.replace('"', "")
    extras = install[install.index("-e") + 1]
    ci_install = re.search(r'^python3 -m pip install --quiet -e "([^"]+)"', CI_RUN, re.M)
    assert ci_install and ci_install.group(1) == extras == ".[test]"
    test_cmd = next(c for c in _commands() if "pytest" in c)
    assert test_cmd == ["python3", "-m", "pytest", "-n", "2"]
    assert re.search(r"^python3 -m pytest -n 2$", CI_RUN, re.M)  # the README's command exactly


def _sample() -> tuple[list[str], list[str], int]:
    """(command, output lines, exit code) of "What a user sees"."""
    block = next(b for b in _blocks("") if b.startswith("$ prover check"))
    lines = block.splitlines()
    assert lines[-2] == "$ echo $?"
    return shlex.split(lines[0][2:]), lines[1:-2], int(lines[-1])


def _no_times(lines: list[str]) -> list[str]:
    return [re.sub(r"\b\d+ ms$", "N ms", line) for line in lines]


def test_what_a_user_sees_is_what_a_real_run_prints():
    cmd, expected, code = _sample()
    assert cmd[0] == "prover"
    r = prover(*cmd[1:], cwd=REPO)
    assert r.returncode == code, r.stderr
    assert _no_times(r.stdout.splitlines()) == _no_times(expected)


@pytest.mark.parametrize(
    "cmd", [c for c in _commands() if c[0] in ("prover", "npuc")], ids=lambda c: " ".join(c[:3])
)
def test_readme_commands_parse(cmd):
    parser = prover_parser() if cmd[0] == "prover" else npuc_parser()
    assert parser.parse_args(cmd[1:]).command == cmd[1]


def test_every_file_the_readme_names_exists():
    names = set(
        re.findall(
            r"`((?:docs|examples|compiler|prover|bench|\.ci)/[^` ]+|\.pre-commit-hooks\.yaml)`",
            README,
        )
    )
    names |= {w for c in _commands() for w in c if w.startswith("examples/")}
    assert len(names) > 15
    missing = sorted(n for n in names if not (REPO / n.split()[0].rstrip(",")).exists())
    assert not missing, missing
