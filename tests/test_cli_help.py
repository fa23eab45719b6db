"""--help (issue 26): options in groups, examples, the defaults stated, exit codes for
every command, and the --reference profiles listed once (one shared text), not a
20-line paragraph inside the option."""

from __future__ import annotations

import argparse

import pytest

from compiler.cli import npuc, prover
from prover.reference import PROFILES

COMMANDS = [(prover, "check"), (prover, "zoo"), (npuc, "compile"), (npuc, "run"), (npuc, "inputs")]


def _sub(tool, name: str) -> argparse.ArgumentParser:
    p = tool.build_parser()
    action = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def _help_of(parser: argparse.ArgumentParser, option: str) -> str:
    parser.format_help()  # writes the lazy helps
    return next(a.help for a in parser._actions if option in a.option_strings)


@pytest.mark.parametrize("tool, name", COMMANDS)
def test_every_command_has_examples_and_exit_codes(tool, name):
    h = _sub(tool, name).format_help()
    assert "\nexamples:\n" in h and "\nexit codes" in h
    examples = h.split("\nexamples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert examples and all(ln.startswith(("  prover ", "  npuc ", " " * 40)) for ln in examples)
    assert "  0  " in h and "  2  " in h and "  4  " in h


@pytest.mark.parametrize("tool", [prover, npuc])
def test_top_level_help_points_to_the_commands(tool):
    h = tool.build_parser().format_help()
    assert "examples:" in h and "COMMAND --help" in h


@pytest.mark.parametrize("tool, name", [(prover, "check"), (npuc, "compile"), (prover, "zoo")])
def test_options_in_groups_and_reference_profiles_once(tool, name):
    sub = _sub(tool, name)
    h = sub.format_help()
    for group in ("what is checked", "proof store", "run:"):
        assert f"\n{group}" in h, group
    assert ("report and outputs:" in h) or ("\noutputs:" in h)
    for p in PROFILES.values():  # every profile's summary, once, in the epilog list
        assert h.replace("\n      ", " ").count(p.summary) == 1, p.summary
    assert len(_help_of(sub, "--reference")) < 160


@pytest.mark.parametrize("tool, name", [(prover, "check"), (npuc, "compile")])
def test_defaults_are_stated(tool, name):
    sub = _sub(tool, name)
    for option in ("--format", "--timeout", "--policy", "--target", "--solver", "--reference"):
        assert "default" in _help_of(sub, option), option
