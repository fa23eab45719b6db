"""SMT backends: Z3, Bitwuzla and cvc5, each in process, each fed the same SMT-LIB2 text.

`run(name, text, var_names, budget)` answers `sat` (with a model of the named
64-bit variables, as signed ints), `unsat` or `unknown` (with a reason).
Budgets: Z3 and cvc5 get a deterministic resource limit plus wall time;
Bitwuzla gets wall time (it has no resource counter).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from .lazy import lazy_module
from .smtlib import WIDTH

if TYPE_CHECKING:
    import z3
else:
    z3 = lazy_module("z3")


@dataclass(frozen=True)
class Budget:
    """Wall-time limit (s) and deterministic resource limit (Z3 rlimit / cvc5 rlimit)."""

    timeout_s: float = 10.0
    rlimit: int = 200_000_000

    def to_dict(self) -> dict:
        return {"timeout_s": self.timeout_s, "rlimit": self.rlimit}


@dataclass
class SatResult:
    status: str  # "sat" | "unsat" | "unknown"
    model: dict[str, int] = field(default_factory=dict)
    reason: str = ""
    time_ms: float = 0.0


def _signed(v: int, width: int = WIDTH) -> int:
    return v - (1 << width) if v >= 1 << (width - 1) else v


def run_z3(
    text: str,
    names: Sequence[str],
    budget: Budget,
    tactic: str | None = "qfbv",
    width: int = WIDTH,
) -> SatResult:
    """Z3 on the SMT-LIB2 text; `tactic=None` is Z3's default strategy."""
    s = z3.Tactic(tactic).solver() if tactic else z3.Solver()
    s.set("rlimit", int(budget.rlimit))
    s.set("timeout", max(1, int(budget.timeout_s * 1000)))
    s.from_string(text)
    r = s.check()
    if r == z3.sat:
        m = s.model()
        model = {}
        for n in names:
            val = m.eval(z3.BitVec(n, width), model_completion=True)
            model[n] = _signed(val.as_long(), width)
        return SatResult("sat", model)
    if r == z3.unsat:
        return SatResult("unsat")
    return SatResult("unknown", reason=f"z3: {s.reason_unknown()}")


def run_bitwuzla(text: str, names: Sequence[str], budget: Budget, width: int = WIDTH) -> SatResult:
    """Bitwuzla (PyPI) parsing the SMT-LIB2 text in process."""
    import bitwuzla as bw

    tm = bw.TermManager()
    opts = bw.Options()
    opts.set(bw.Option.PRODUCE_MODELS, True)
    parser = bw.Parser(tm, opts)
    start = time.monotonic()
    parser.configure_terminator(lambda: time.monotonic() - start > budget.timeout_s)
    parser.parse(text, True, False)
    solver = parser.bitwuzla()
    r = solver.check_sat()
    if r == bw.Result.SAT:
        funs = {str(f.symbol()): f for f in parser.get_declared_funs()}
        model = {
            n: _signed(int(solver.get_value(funs[n]).value(10)), width) for n in names if n in funs
        }
        return SatResult("sat", model)
    if r == bw.Result.UNSAT:
        return SatResult("unsat")
    return SatResult("unknown", reason="bitwuzla: time limit reached")


def run_cvc5(text: str, names: Sequence[str], budget: Budget, width: int = WIDTH) -> SatResult:
    """cvc5 (PyPI) parsing the SMT-LIB2 text in process."""
    import cvc5

    tm = cvc5.TermManager()
    solver = cvc5.Solver(tm)
    solver.setOption("produce-models", "true")
    solver.setOption("tlimit-per", str(max(1, int(budget.timeout_s * 1000))))
    solver.setOption("rlimit-per", str(int(budget.rlimit)))
    sm = cvc5.SymbolManager(tm)
    parser = cvc5.InputParser(solver, sm)
    parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, text, "obligation")
    while True:
        cmd = parser.nextCommand()
        if cmd.isNull():
            break
        cmd.invoke(solver, sm)
    r = solver.checkSat()
    if r.isSat():
        terms = {str(t): t for t in sm.getDeclaredTerms()}
        model = {}
        for n in names:
            if n in terms:
                model[n] = _signed(int(solver.getValue(terms[n]).getBitVectorValue(10)), width)
        return SatResult("sat", model)
    if r.isUnsat():
        return SatResult("unsat")
    return SatResult("unknown", reason=f"cvc5: {r.getUnknownExplanation()}")


class Backend(Protocol):
    """How `run` calls a backend: SMT-LIB2 text, the variables to read back, the budget."""

    def __call__(
        self, text: str, names: Sequence[str], budget: Budget, *, width: int = WIDTH
    ) -> SatResult: ...


BACKENDS: dict[str, Backend] = {
    "bitwuzla": run_bitwuzla,
    "z3": run_z3,
    "cvc5": run_cvc5,
}


def run(
    name: str, text: str, names: Sequence[str], budget: Budget, width: int = WIDTH
) -> SatResult:
    """Run backend `name` (variables are `width`-bit); the result carries its wall time."""
    if name not in BACKENDS:
        raise ValueError(f"unknown SMT backend {name!r}; known: {sorted(BACKENDS)}")
    t0 = time.perf_counter()
    res = BACKENDS[name](text, names, budget, width=width)
    res.time_ms = (time.perf_counter() - t0) * 1000
    return res


def version(name: str) -> str:
    """Version string of a backend (recorded in the proof store)."""
    if name == "z3":
        return z3.get_version_string()
    if name == "bitwuzla":
        import bitwuzla

        return bitwuzla.version()
    if name == "cvc5":
        import cvc5

        return cvc5.__version__
    return ""
