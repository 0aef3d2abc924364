"""Golden vectors for firmware tests: every quantized tensor of one run as C headers or raw bytes + manifest.

``golden_files(program, values, fmt, layout)`` gives the files (name -> text or bytes), in execution order:

* ``c``: one header per tensor -- its ONNX name, dims, dtype, scale, zero point and layout (NHWC or NCHW) as macros
  and ``static const`` arrays, the data as a ``static const`` array of the exact integer type (``int8_t`` ...) --
  and ``golden.h`` including them all;
* ``bin``: one file of raw little-endian bytes per tensor and ``manifest.json`` (name, file, shape, dtype,
  layout, scale, zero point): the manifest ``npu-sim compare`` reads (docs/DUMPS.md).

``write_golden`` writes them into a new folder ``<out>/<fmt>`` atomically (a temporary folder renamed into
place).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from npu_sim.ir import Program
from npu_sim.render.files import replace_folder

FORMATS = ("c", "bin")
C_TYPES = {"int4": "int8_t", "int8": "int8_t", "uint4": "uint8_t", "uint8": "uint8_t", "int16": "int16_t",
           "uint16": "uint16_t", "int32": "int32_t"}
PER_LINE = 16


def golden_tensors(prog: Program, values: dict) -> list:
    """(tensor, its integers, producing node) of every quantized activation in ``values``, once per ONNX name,
    in execution order (program inputs first)."""
    producer = {o: n for n in prog.nodes for o in n.outputs}
    order = list(prog.inputs.values()) + [o for n in prog.nodes for o in n.outputs]
    out, seen = [], set()
    for tname in order:
        t = prog.tensors[tname]
        if tname not in values or t.q is None or t.is_const or t.float_name in seen:
            continue
        seen.add(t.float_name)
        out.append((t, values[tname], producer.get(tname)))
    return out


def _laid_out(arr: np.ndarray, layout: str) -> np.ndarray:
    if layout == "nhwc" and arr.ndim in (3, 4):
        return np.transpose(arr, (0, 2, 1) if arr.ndim == 3 else (0, 2, 3, 1))
    return arr


def _identifiers(names: list[str]) -> list[str]:
    out, used = [], set()
    for name in names:
        ident = re.sub(r"[^A-Za-z0-9_]", "_", name).strip("_") or "tensor"
        if ident[0].isdigit():
            ident = "t_" + ident
        ident = ident[:100]
        base, k = ident, 1
        while ident.lower() in used:
            k += 1
            ident = f"{base}_{k}"
        used.add(ident.lower())
        out.append(ident)
    return out


def _c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("?", "\\?") + '"'


def _c_int(v: int) -> str:
    return "(-2147483647 - 1)" if v == -(2 ** 31) else str(v)


def _c_float(v: float) -> str:
    text = f"{float(v):.9g}"
    return text + ("f" if any(ch in text for ch in ".e") else ".0f")


def c_header(ident: str, t, arr: np.ndarray, layout: str, node, origin: str) -> str:
    up = ident.upper()
    ctype = C_TYPES[t.q.dtype]
    data = _laid_out(arr, layout).reshape(-1).astype(np.int64)
    dims = list(_laid_out(arr, layout).shape)
    made = f"node {node.name} [{node.op}]" if node is not None else "the model input"
    comment = f"{t.float_name} (program tensor {t.name}), made by {made}; {origin}".replace("*/", "* /")
    lines = [f"/* Golden vector written by npu-sim: {comment} */", f"#ifndef NPU_SIM_GOLDEN_{up}_H",
             f"#define NPU_SIM_GOLDEN_{up}_H", "", "#include <stdint.h>", "",
             f"#define {up}_NAME {_c_string(t.float_name)}", f"#define {up}_DTYPE {_c_string(t.q.dtype)}",
             f"#define {up}_LAYOUT {_c_string(layout.upper() if arr.ndim in (3, 4) else 'NCHW')}",
             f"#define {up}_RANK {len(dims)}", f"#define {up}_SIZE {data.size}",
             f"static const int32_t {ident}_dims[{max(1, len(dims))}] = {{{', '.join(map(str, dims)) or '1'}}};"]
    if t.q.per_tensor:
        lines += [f"#define {up}_SCALE {_c_float(t.q.scale)}", f"#define {up}_ZERO_POINT {int(t.q.zero_point)}"]
    else:
        n = t.q.scale.size
        axis = t.q.axis if layout != "nhwc" or arr.ndim not in (3, 4) else (arr.ndim - 1 if t.q.axis == 1 else
                                                                            t.q.axis - (t.q.axis > 1))
        lines += [f"#define {up}_AXIS {axis}",
                  f"static const float {ident}_scale[{n}] = {{{', '.join(_c_float(s) for s in t.q.scale)}}};",
                  f"static const int32_t {ident}_zero_point[{n}] = "
                  f"{{{', '.join(str(int(z)) for z in t.q.zero_point)}}};"]
    lines.append(f"static const {ctype} {ident}_data[{max(1, data.size)}] = {{")
    for i in range(0, data.size, PER_LINE):
        lines.append("    " + ", ".join(_c_int(int(v)) for v in data[i:i + PER_LINE]) + ",")
    lines += ["};", "", f"#endif /* NPU_SIM_GOLDEN_{up}_H */", ""]
    return "\n".join(lines)


def golden_files(prog: Program, values: dict, fmt: str, layout: str = "nchw") -> dict:
    """File name -> content (str for text, bytes for raw data)."""
    tensors = golden_tensors(prog, values)
    idents = _identifiers([t.float_name for t, _, _ in tensors])
    origin = f"model {Path(prog.model_path).name or '<model>'}, board {prog.board}"
    files: dict = {}
    if fmt == "c":
        for ident, (t, arr, node) in zip(idents, tensors):
            files[f"{ident}.h"] = c_header(ident, t, arr, layout, node, origin)
        files["golden.h"] = "\n".join(
            [f"/* Golden vectors written by npu-sim ({origin}): every tensor, in execution order. */",
             "#ifndef NPU_SIM_GOLDEN_H", "#define NPU_SIM_GOLDEN_H", ""]
            + [f'#include "{ident}.h"' for ident in idents]
            + ["", f"#define NPU_SIM_GOLDEN_COUNT {len(idents)}", "", "#endif /* NPU_SIM_GOLDEN_H */", ""])
        return files
    entries = []
    for ident, (t, arr, _) in zip(idents, tensors):
        data = np.ascontiguousarray(_laid_out(arr, layout))
        storage = np.dtype(t.q.np_dtype)
        files[f"{ident}.bin"] = data.astype(storage.newbyteorder("<")).tobytes()
        entry = {"name": t.float_name, "file": f"{ident}.bin", "shape": list(data.shape), "dtype": storage.name,
                 "layout": layout if arr.ndim in (3, 4) else "nchw", "quantized_dtype": t.q.dtype}
        if t.q.per_tensor:
            entry.update(scale=float(t.q.scale), zero_point=int(t.q.zero_point))
        entries.append(entry)
    files["manifest.json"] = json.dumps({"format": "npu-sim tensor dump", "version": 1, "tensors": entries},
                                        indent=1)
    return files


def write_golden(out_dir, prog: Program, values: dict, fmt: str, layout: str = "nchw") -> Path:
    """Write ``golden_files`` into ``<out_dir>/<fmt>`` (replacing it whole, atomically); returns that folder."""
    files = golden_files(prog, values, fmt, layout)

    def fill(tmp: Path) -> None:
        for name, content in files.items():
            (tmp / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))

    return replace_folder(Path(out_dir) / fmt, fill)
