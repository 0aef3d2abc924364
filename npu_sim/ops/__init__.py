"""The op families: how each op is prepared (float scales -> integer multipliers, shifts, tables) and run.

One module per family; ``ops/tflite`` holds LiteRT's integer recipes. Which function lowers which op is in
``npu_sim.lowering.registry``; the facts about an op (its kind, ...) are in ``npu_sim.opset``.
"""
