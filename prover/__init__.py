"""The `prover` package of npu-fusion-prover (see its README)."""

__version__ = "0.1.0"  # the one version of the three packages; pyproject.toml reads prover's
