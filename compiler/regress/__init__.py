"""Regression artefacts: emitted counterexample tests, their replay, the committed proof store."""
