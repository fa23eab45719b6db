"""The ONNX Runtime side: the tables ORT computes and the probe of the host ORT's behaviour."""
