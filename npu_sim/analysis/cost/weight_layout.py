"""A MAC op's weights as the board stores them: the board's weight layout (``[memory]``'s ``weight_ublock``,
``weight_ifm_block``, ``weight_kernel_round``, ``weight_subkernel``; docs/BOARDS.md), the zeros it pads in
included. With every key at its default the layout is dense (elements = the weight tensor's).

The Ethos-U55's, as Vela 5.2 writes its weight stream (``ethos_u55_weight_encoder.cpp``, ``ethos_u55.cpp``): output
channels in micro-blocks of 8; depth-first, input channels in blocks of 32 (16 for 16-bit inputs) for every
kernel element; part-kernel-first, input channels in micro-blocks of 8 and each sub-kernel's elements padded to a
multiple of 4 (2 for 16-bit inputs); depthwise, each sub-kernel's elements padded to a multiple of 4; kernels in
sub-kernels of at most 8 x 8. Vela takes part-kernel-first for at most 8 input channels, else when the padded
blocks are used at least as well (its ``ChooseKernelMethod``).
"""
from __future__ import annotations

import math

from npu_sim.ir import Program
from npu_sim.opset import WEIGHT_INPUT, facts_of


def round_up(n: int, multiple: int) -> int:
    return -(-int(n) // multiple) * multiple


def out_channels(program: Program, node) -> int:
    """A MAC op's output channels (axis 1 of a windowed op's NCHW output, else the last axis)."""
    out = program.tensors[node.outputs[0]].shape
    if not out:
        return 1
    facts = facts_of(node.op)
    return out[1] if facts.kind == "mac" and facts.window and len(out) >= 2 else out[-1]


def sub_kernels(kh: int, kw: int, mem) -> list[int]:
    """Elements of each sub-kernel the board splits a kh x kw kernel into (``weight_subkernel``; 0: whole)."""
    s = mem.weight_subkernel
    if not s:
        return [kh * kw]
    return [min(s, kh - y) * min(s, kw - x) for y in range(0, kh, s) for x in range(0, kw, s)]


def depthwise_elements(channels: int, kh: int, kw: int, mem) -> int:
    """Elements of a depthwise weight stream in the board's layout: channels in micro-blocks, each sub-kernel
    padded to ``weight_kernel_round`` elements."""
    per_channel = sum(round_up(e, mem.weight_kernel_round) for e in sub_kernels(kh, kw, mem))
    return round_up(channels, mem.weight_ublock) * per_channel


def part_kernel_first(cin: int, kernel: int, wide: bool, mem) -> bool:
    """Vela's choice of traversal (its ``ChooseKernelMethod``): part-kernel-first for at most one micro-block of
    input channels, else when it uses the padded blocks at least as well as depth-first."""
    if cin <= mem.weight_ublock:
        return True
    block = max(mem.weight_ifm_block // (2 if wide else 1), 1)
    rnd = max(mem.weight_kernel_round // (2 if wide else 1), 1)
    depth_use = cin / round_up(cin, block)
    part_use = cin / round_up(cin, mem.weight_ublock) * kernel / round_up(kernel, rnd)
    return part_use >= depth_use


def weight_layout_elements(program: Program, node, mem) -> int:
    """Elements (zeros of the layout included) of a MAC op's constant weights as the board stores them."""
    w = node.weights
    shape = tuple(w.data.shape) if w is not None else tuple(program.tensors[node.inputs[WEIGHT_INPUT]].shape)
    facts = facts_of(node.op)
    geo = node.geometry
    groups = geo.groups if geo is not None else 1
    if facts.window and len(shape) >= 3:
        kh, kw = (shape[2], shape[3]) if len(shape) >= 4 else (1, shape[2])
        cout, cin = (shape[1] * groups, shape[0]) if facts.transposed else (shape[0], shape[1])
        if groups > 1 and cin == 1 and not facts.transposed:
            return depthwise_elements(cout, kh, kw, mem)
    else:  # Gemm / MatMul: (K, N) along the record's axis
        axis = w.axis if w is not None else len(shape) - 1
        cout, cin, kh, kw = shape[axis], math.prod(shape) // max(shape[axis], 1), 1, 1
    wide = (program.tensors[node.inputs[0]].q.bits if program.tensors[node.inputs[0]].q else 8) > 8
    subs = sub_kernels(kh, kw, mem)
    if part_kernel_first(cin, kh * kw, wide, mem):
        rnd = max(mem.weight_kernel_round // (2 if wide else 1), 1)
        per_out = sum(round_up(e, rnd) for e in subs) * round_up(cin, mem.weight_ublock)
    else:
        per_out = kh * kw * round_up(cin, max(mem.weight_ifm_block // (2 if wide else 1), 1))
    return round_up(cout, mem.weight_ublock) * per_out
