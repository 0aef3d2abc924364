"""The QDQ model as ONNX: reading its quantization (``graph``), its own float semantics (``float_model``), and
rewriting it (``recalibrate``: quantization groups, int16 promotion, quantize_static settings, re-calibration)."""
