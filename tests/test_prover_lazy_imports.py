"""Solvers are imported only when a solver runs: a check decided by segments loads no z3."""

from __future__ import annotations

import subprocess
import sys

SOLVER_MODULES = ("z3", "cvc5", "bitwuzla")

DECIDE = """
import sys
from prover.api import check
from prover.obligation import Obligation
from prover.terms import Var, op
acc = Var("acc")
if SOLVER == "auto":  # hard for SMT, milliseconds for segments
    before = op("requant_float", acc, scale=0.0123, zp=3, out="int8")
    after = op("requant_double", acc, multiplier=1690499072, shift=-6, zp=3, out="int8")
else:
    before = op("clip", acc, lo=-5, hi=5)
    after = op("saturate", op("clip", acc, lo=-5, hi=5), type="int8")
ob = Obligation("lowering", before, after, {"acc": (-30000, 30000)}, "bounded:1")
v = check(ob, solver=SOLVER)
print(v.status, v.solver, sorted(m for m in MODULES if m in sys.modules))
"""


def _run(solver: str) -> list[str]:
    code = DECIDE.replace("SOLVER", repr(solver)).replace("MODULES", repr(SOLVER_MODULES))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return p.stdout.split()


def test_segments_check_imports_no_solver():
    status, solver, *loaded = _run("auto")
    assert (status, solver) == ("proven", "segments")
    assert loaded == ["[]"]


def test_a_solver_run_imports_it_on_demand():
    status, solver, *loaded = _run("z3")
    assert (status, solver) == ("proven", "z3")
    assert "'z3']" in loaded[-1]
