"""More TFLite builtin operators as ONNX QDQ groups (``MORE``: operator name -> function(builder, op)), beside
``npu_sim.frontend.tflite.ops`` (whose helpers these use)."""
from __future__ import annotations

MORE: dict = {}
