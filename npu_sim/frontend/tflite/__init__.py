"""The TFLite frontend: a ``.tflite`` flatbuffer read, validated and lowered to the ONNX QDQ form npu-sim reads.

``flatbuf`` reads and validates the file (``read_tflite``: subgraph 0 as plain Python -- tensors, operators in
execution order, builtin options; every problem a ``ModelLoadError`` naming the file and the operator or tensor);
``options`` decodes operator codes and builtin options; ``translate`` lowers the ops to an in-memory ONNX QDQ model.
Needs the optional extra ``npu-sim[tflite]`` (the ``tflite`` package: the TFLite schema's Python bindings).
"""
