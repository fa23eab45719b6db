"""A command runs with the collector's young threshold raised (`GC_YOUNG_THRESHOLD`) and
the caller's thresholds restored afterwards, whatever the body did."""

from __future__ import annotations

import argparse
import gc

from compiler.cli.common import GC_YOUNG_THRESHOLD, run_main


def test_threshold_raised_while_the_body_runs_and_restored():
    before = gc.get_threshold()
    seen = []

    def ok(_args):
        seen.append(gc.get_threshold())
        return 0

    def bug(_args):
        seen.append(gc.get_threshold())
        raise RuntimeError("boom")

    assert run_main("t", ok, argparse.Namespace()) == 0
    assert gc.get_threshold() == before
    assert run_main("t", bug, argparse.Namespace()) == 4
    assert gc.get_threshold() == before
    assert seen == [(max(before[0], GC_YOUNG_THRESHOLD), *before[1:])] * 2
    assert seen[0][0] >= GC_YOUNG_THRESHOLD > 700
