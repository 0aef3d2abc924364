"""What is measured on an integer program: metrics, the float reference (onnxruntime), check, cost, accuracy,
advisor, compare."""
