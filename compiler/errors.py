"""Compiler exceptions. Every message is one line and names the node it is about."""

from __future__ import annotations

from prover.errors import BadInput


class CompilerError(Exception):
    """Base class of the compiler's errors."""


class FrontendError(CompilerError, BadInput):
    """The ONNX model cannot be loaded into the integer IR (unsupported op, bad dtype...).

    `bad_input`: no reading makes the value meaningful (bad even on the host);
    `overridable`: the cause is an initializer overridable at run time;
    `run_time_shape`: a host output's shape follows the values (ORT computes it at run time);
    `run_time_input`: an input the NPU form needs constant is computed at run time (the op
    still runs on the host).
    """

    bad_input: bool = False
    overridable: bool = False
    run_time_shape: bool = False
    run_time_input: bool = False


class InternalError(CompilerError):
    """A bug in the tool, e.g. a counterexample that does not reproduce on replay."""


def node_label(name: str, op_type: str) -> str:
    """How messages refer to an ONNX node."""
    return f"node '{name}' ({op_type})"
