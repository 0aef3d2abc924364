"""The front door: safe ONNX reading and shape inference, graph rewrites, dataset and input files."""
