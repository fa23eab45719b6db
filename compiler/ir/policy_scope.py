"""Where a `bounded:N` policy may be used for one rewrite.

Per-op differences compose: an op that is off by one step feeding a table can be
off by several steps after it (a Sigmoid table amplifies by its slope). So a
rewrite may use the run's `bounded:N` only where its result reaches the graph
outputs through layout ops alone; everywhere else its obligation is `bitwise`.
Then the whole compiled model differs from ONNX Runtime by at most N.
"""

from __future__ import annotations

from prover.policy import Policy

from .graph import LAYOUT_OPS, Graph


def is_terminal(g: Graph, value: str) -> bool:
    """True when `value` reaches graph outputs through layout ops only (and is used)."""
    users = g.users(value)
    if not users:
        return value in g.outputs
    return all(u.op in LAYOUT_OPS and is_terminal(g, u.output) for u in users)


def effective_policy(g: Graph, value: str, policy: Policy) -> Policy:
    """The run's policy for a terminal value, bitwise otherwise."""
    if policy.bound == 0 or is_terminal(g, value):
        return policy
    return Policy(0)
