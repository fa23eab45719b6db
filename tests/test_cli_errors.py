"""Bad input is decided by type: every error class of the tool is either a `BadInput`
(exit 2) or a tool bug (exit 4); a read-only gate miss (`StoreMiss`) exits 5."""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil

import onnx.checker
import pytest
from google.protobuf.message import DecodeError

import compiler
import npu_backend
import prover
from compiler.cli.common import run_main
from compiler.report.model import ExitCode
from prover.errors import BadInput, StoreMiss

# Every exception class defined in prover/, compiler/ and npu_backend/, by what it means.
BAD_INPUT = {
    "compiler.cli.common.UsageError",
    "compiler.errors.FrontendError",
    "compiler.frontend.qdq_reading.DefaultSessionRefusal",
    "npu_backend.target.TargetError",
    "npu_backend.program.ProgramError",
    "npu_backend.simulator.SimulatorInputError",
    "npu_backend.host.HostInputError",
    "npu_backend.ledger.LedgerInputError",
    "prover.domain.KernelError",
    "prover.terms.PreconditionViolation",
    "prover.errors.StoreCorrupt",
    "prover.errors.VacuousObligation",
    "compiler.zoo.manifest.ManifestError",
}
TOOL_BUG = {
    "compiler.errors.CompilerError",
    "compiler.errors.InternalError",
    "compiler.frontend.registry.DuplicateConverter",
    "compiler.ort.region_table.RegionError",  # caught by the frontend: a refused region
    "npu_backend.simulator.SimulatorError",
    "npu_backend.simulator.UndefinedResult",
    "npu_backend.ledger.LedgerError",
    "npu_backend.validate.ValidationError",
    "npu_backend.host.HostError",
    "npu_backend.buffers.CodegenError",
    "npu_backend.schedule.ScheduleError",  # codegen reports it as a CodegenError
    "npu_backend.lifetime.LifetimeError",
    "prover.errors.ProverError",
    "prover.errors.SolverDisagreement",
    "prover.errors.ReplayMismatch",
    "prover.errors.NotApplicable",
    "prover.errors.LiftError",
    "compiler.zoo.decide.DecisionLost",  # a value (its models unknown), never raised
}
OWN_CODE = {"prover.errors.BadInput": None, "prover.errors.StoreMiss": ExitCode.PROOF_MISSING}


def _error_classes() -> dict[str, type[BaseException]]:
    """name -> class of every exception class defined in the three packages."""
    found: dict[str, type[BaseException]] = {}
    for pkg in (prover, compiler, npu_backend):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            mod = importlib.import_module(info.name)
            for _, cls in inspect.getmembers(mod, inspect.isclass):
                if issubclass(cls, BaseException) and cls.__module__ == info.name:
                    found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


def _by_name(name: str) -> type[BaseException]:
    mod, _, cls = name.rpartition(".")
    return getattr(importlib.import_module(mod), cls)


def test_every_error_class_is_classified():
    """A new error class must be declared bad input or tool bug here (no silent exit 4)."""
    found = set(_error_classes())
    unclassified = found - BAD_INPUT - TOOL_BUG - set(OWN_CODE)
    assert not unclassified, f"classify these errors as BAD_INPUT or TOOL_BUG: {unclassified}"
    vanished = (BAD_INPUT | TOOL_BUG | set(OWN_CODE)) - found
    assert not vanished, f"renamed or removed error classes: {vanished}"


@pytest.mark.parametrize("name", sorted(BAD_INPUT))
def test_bad_input_classes_derive_from_bad_input(name):
    assert issubclass(_by_name(name), BadInput)


@pytest.mark.parametrize("name", sorted(TOOL_BUG))
def test_tool_bug_classes_are_not_bad_input(name):
    assert not issubclass(_by_name(name), BadInput)


def test_store_miss_is_not_bad_input():
    assert not issubclass(StoreMiss, BadInput)


def _exit_of(exc: BaseException, capsys) -> tuple[int, str]:
    def body(_args: argparse.Namespace) -> int:
        raise exc

    code = run_main("prog", body, argparse.Namespace(debug=False))
    return code, capsys.readouterr().err


def _instance(cls: type[BaseException]) -> BaseException:
    if cls.__name__ == "ValidationError" and cls.__module__ == "npu_backend.validate":
        from npu_backend.validate import ValidationIssue

        return cls([ValidationIssue("layout_mismatch", "s0", "something is wrong")])
    return cls("something is wrong\nsecond line")


@pytest.mark.parametrize("name", sorted(BAD_INPUT))
def test_bad_input_exits_2_with_one_line(name, capsys):
    code, err = _exit_of(_instance(_by_name(name)), capsys)
    assert code == ExitCode.BAD_INPUT == 2
    assert err == "prog: error: something is wrong\n"


@pytest.mark.parametrize("name", sorted(TOOL_BUG))
def test_tool_bug_exits_4(name, capsys):
    code, err = _exit_of(_instance(_by_name(name)), capsys)
    assert code == ExitCode.INTERNAL == 4
    assert "internal error" in err and "--debug" in err


def test_store_miss_exits_5(capsys):
    code, err = _exit_of(StoreMiss("no proof record for obligation abc"), capsys)
    assert code == ExitCode.PROOF_MISSING == 5
    assert err == "prog: error: no proof record for obligation abc\n"


@pytest.mark.parametrize(
    "exc",
    [
        onnx.checker.ValidationError("bad model"),
        DecodeError("truncated"),
        FileNotFoundError(2, "No such file or directory", "x.onnx"),
    ],
    ids=["onnx-checker", "protobuf", "oserror"],
)
def test_third_party_bad_input_exits_2(exc, capsys):
    code, err = _exit_of(exc, capsys)
    assert code == 2 and err.startswith("prog: error: ") and err.count("\n") == 1


def test_a_plain_exception_is_a_tool_bug(capsys):
    code, _ = _exit_of(KeyError("oops"), capsys)
    assert code == 4
