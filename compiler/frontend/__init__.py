"""The ONNX frontend: reading a model (QLinear, QDQ, float16 contexts, batch) into the IR."""
