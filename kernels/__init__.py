"""Integer kernels of npu-sim.

Integers in, integers out. This package is a leaf: it imports numpy and numba only, never ``npu_sim``.
Every kernel has a plainly written golden twin in ``tests/naive.py``; hypothesis tests compare them bit for bit.
"""
