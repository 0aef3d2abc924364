"""Static rules for kernels/: one njit decorator, no fastmath, documented kernels, no npu_sim imports."""
import ast
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parent.parent / "kernels"
FILES = sorted(KERNELS.glob("*.py"))


def _is_njit(dec: ast.expr) -> bool:
    if isinstance(dec, ast.Call):
        dec = dec.func
    return (isinstance(dec, ast.Name) and dec.id == "njit") or (isinstance(dec, ast.Attribute)
                                                                 and dec.attr == "njit")


def test_kernel_files_found():
    names = {p.name for p in FILES}
    assert {"_jit.py", "fixedpoint.py", "requantize.py", "gemm.py", "conv2d.py", "conv_transpose2d.py",
            "pool2d.py", "add.py", "mul.py", "leaky_relu.py", "resize.py"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_only_jit_module_uses_numba_njit(path):
    if path.name == "_jit.py":
        return
    text = path.read_text()
    assert "numba.njit" not in text, f"{path.name}: use kernels._jit.njit"
    assert "@numba" not in text, f"{path.name}: use kernels._jit.njit"
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "numba":
            assert all(a.name not in ("njit", "jit") for a in node.names), f"{path.name} imports numba's njit"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_fastmath(path):
    text = path.read_text().replace(" ", "")
    assert "fastmath=True" not in text
    assert '"fastmath":True' not in text and "'fastmath':True" not in text


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_njit_functions_have_docstrings(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(map(_is_njit, node.decorator_list)):
            assert ast.get_docstring(node), f"{path.name}:{node.lineno} @njit {node.name} lacks a docstring"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_kernels_do_not_import_npu_sim(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not any(a.name.split(".")[0] == "npu_sim" for a in node.names), path.name
        elif isinstance(node, ast.ImportFrom):
            assert node.level <= 1, f"{path.name}: relative import leaves the kernels package"
            assert (node.module or "").split(".")[0] != "npu_sim", path.name
        elif isinstance(node, ast.Call):  # importlib.import_module("npu_sim...") / __import__("npu_sim")
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            if name in ("import_module", "__import__"):
                for arg in node.args:
                    assert not (isinstance(arg, ast.Constant) and str(arg.value).startswith("npu_sim")), \
                        f"{path.name} imports npu_sim dynamically"
