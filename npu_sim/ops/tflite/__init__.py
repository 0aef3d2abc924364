"""The ``tflite`` arithmetic: TFLite's integer reference kernels, op by op (board ``requantize = "tflite"``).

LiteRT (TFLite) computes a full-integer model with fixed integer recipes; the Ethos-U NPUs reproduce them. This
package lowers each supported ONNX op (from tf2onnx's QDQ twin of a .tflite, or any QDQ model) to those recipes:

* Conv / depthwise Conv / Gemm / MatMul: per output channel ``(M, s) = QuantizeMultiplier(sx*sw[c]/sy)`` (float64
  of the float32 scales); 8-bit: int32 accumulator + int32 bias, ``MultiplyByQuantizedMultiplier`` (double
  rounding); 16x8: int64 accumulator + int64 bias and the int64 overload (16-bit reduced multiplier)
  (``kernels/tflite_requantize.py``).
* Add/Sub, Mul, AveragePool, Mean, Concat, Resize, Quantize/Requantize, Logistic/Tanh/HardSwish, Softmax: the
  modules below, each op with its kernel in ``kernels/tflite_*.py``.

Modules: ``mac`` (Conv, Gemm, MatMul), ``elementwise`` (Add/Sub, Mul, Relu/Clip, Concat), ``convert``
(Quantize, Requantize), ``pool`` (AveragePool, Mean), ``resize``, ``lut`` (Logistic, Tanh, HardSwish),
``softmax``; ``common`` holds the shared multipliers, activation range and rescale. ``npu_sim.lowering.registry``
maps each op to its function.

Any op not in the registry's ``tflite`` table is refused at lowering with the node's name: a tflite board never
falls back to another arithmetic silently.
"""
