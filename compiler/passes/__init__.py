"""Compiler passes, run in the fixed order of `compiler.pipeline.PASSES`."""
