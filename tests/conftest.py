"""Shared pytest fixtures (keep this file tiny; put feature fixtures in their own test files)."""

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    """A deterministic random generator, fresh for every test."""
    return np.random.default_rng(20261130)
