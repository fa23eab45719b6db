"""The frontend's converters, one module per op family; importing this package registers
them all in `compiler.frontend.registry.REGISTRY`."""

from . import constant, conv, elementwise, host, layout, matmul, project, qdq  # noqa: F401 - imported for their registrations
