"""Compiler passes, run in the fixed order of `compiler.passes.pipeline.PASSES`."""
