"""The frontend's converters, one module per op family (`compiler.frontend.converters`
imports them all, which registers them in `compiler.frontend.registry.REGISTRY`)."""
