"""Seeded postprocessing bugs: the prover refutes every output-changing mutant and proves
every equivalent variant, in agreement with exhaustive enumeration (bench/mutants_catalog.py).

The full side-by-side table with random testing is `python3 bench/mutation_harness.py`.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import mutation_harness as H  # noqa: E402
from mutants_catalog import BUG, EQUIVALENT, catalog, columns  # noqa: E402

from prover.api import check  # noqa: E402
from prover.lift import row_value  # noqa: E402

MUTANTS = {m.name: m for m in catalog()}


def test_catalogue_size_and_labels():
    bugs = [m for m in MUTANTS.values() if m.expect == BUG]
    eqs = [m for m in MUTANTS.values() if m.expect == EQUIVALENT]
    assert len(bugs) >= 30 and len(eqs) >= 8
    hashes = [m.obligation().hash for m in MUTANTS.values()]
    assert len(set(hashes)) == len(hashes), "two mutants are the same obligation"


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_prover_matches_exhaustive_enumeration(name):
    m = MUTANTS[name]
    count, first = H.enumerate_truth(m)
    assert (BUG if count else EQUIVALENT) == m.expect, f"catalogue label wrong ({count} differ)"
    v = check(m.obligation(), timeout_s=30.0)
    if m.expect == EQUIVALENT:
        assert v.status == "proven", v.reason
        return
    assert v.status == "refuted", v.reason
    cx = v.counterexample
    # The reported witness really differs, and it is the simplest one: nothing nearer zero does.
    var = next(iter(m.ranges))
    w = cx.assignment[var]
    assert H.differs(m, {k: np.array([cx.assignment[k]]) for k in m.ranges})[0]
    if len(m.ranges) == 1:
        lo, hi = m.ranges[var]
        near = np.arange(max(lo, -abs(w) + 1), min(hi, abs(w) - 1) + 1, dtype=np.int64)
        if near.size:
            assert not H.differs(m, {var: near}).any()
    if m.lift is not None:
        assert cx.lifted_input is not None, cx.lift_note
        assert row_value(m.lift, cx.lifted_input) == w
        assert len(cx.lifted_input) == len(m.lift.weights)
        assert all(-128 <= x <= 127 for x in cx.lifted_input)


def test_random_testing_misses_saturation_bugs_the_prover_kills():
    """The point of the exercise: 100k random rows never reach the saturation edge."""
    for name in ("rq_no_saturation", "rq_sat_symmetric", "rq_zp_after_sat"):
        m = MUTANTS[name]
        assert H.random_hits(m, 100_000) == 0
        assert check(m.obligation()).status == "refuted"


def test_random_rows_go_through_the_dot_product():
    m = MUTANTS["rq_single_rounding"]
    s = H.random_samples(m, 50)["acc"]
    c = columns()[0]
    rng = np.random.default_rng(H.RANDOM_SEED)
    rows = rng.integers(-128, 128, size=(50, len(c.weights)), dtype=np.int64)
    assert [row_value(c.lift, r) for r in rows] == s.tolist()
    assert c.lo <= s.min() and s.max() <= c.hi


def test_harness_flags_a_survivor_and_a_refuted_equivalent():
    bug, eq = MUTANTS["rq_dropped"], MUTANTS["eq_table_other_order"]
    rb = H.run_one(bug, 30.0)
    re = H.run_one(eq, 30.0)
    assert H.problems(rb, bug) == [] and H.problems(re, eq) == []
    assert H.problems(dataclasses.replace(rb, prover="unknown"), bug)
    assert H.problems(dataclasses.replace(re, prover="refuted"), eq)
    mislabelled = dataclasses.replace(eq, expect=BUG)
    assert any("catalogue says" in p for p in H.problems(H.run_one(mislabelled, 30.0), mislabelled))


def test_harness_command_exit_codes(capsys):
    assert H.main(["--only", "rq_dropped,eq_composed_tables,index_transposed"]) == 0
    out = capsys.readouterr().out
    assert "prover         2/2 (100%)" in out and "Equivalent variants proven: 1/1" in out


def test_harness_command_fails_on_a_surviving_mutant(monkeypatch, capsys):
    """A mutant that changes outputs but is labelled equivalent makes the command exit 1."""
    wrong = dataclasses.replace(MUTANTS["lut_index_off_by_one"], expect=EQUIVALENT)
    monkeypatch.setattr(H, "catalog", lambda: (wrong,))
    assert H.main([]) == 1
    assert "FAILED" in capsys.readouterr().out
