"""Shared pytest fixtures (keep this file tiny; put feature fixtures in their own test files)."""

import numpy as np
import pytest

# Every JSON report a test writes under tmp_path is validated against the shipped schema.
from report_schema_hook import pytest_sessionfinish  # noqa: F401

# `--cpu-durations=N`: CPU time per test, the measure of the suite's time budget.
pytest_plugins = ["cpu_time_hook"]

# Test data is not collected (e.g. the replay test kept in tests/data/emitted_before_layout/;
# tests/test_emitted_compat.py runs it in its own process).
collect_ignore_glob = ["data/*"]


@pytest.fixture
def rng() -> np.random.Generator:
    """A deterministic random generator, fresh for every test."""
    return np.random.default_rng(20261130)
