"""The frontend's converters, one module per op family; importing this package registers
them all in `compiler.frontend.registry.REGISTRY`."""

from . import constant, conv, layout, matmul  # noqa: F401 - imported for their registrations
