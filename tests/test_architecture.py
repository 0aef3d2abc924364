"""The house in layers: imports point one way, rooms a newcomer can read in one sitting.

Every module of ``npu_sim/`` and ``kernels/`` is parsed (no import is executed) and every import statement is
read, those inside functions too. A module's layer is the entry of ``LAYERS`` that is the longest prefix of its
name; an import may go to the same or a lower layer only. Within a layer, modules may import each other as long
as no circle forms (Tarjan's strongly connected components over the whole graph).
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lowest first. ``npu_sim.lowering.problem`` and ``npu_sim.lowering.context`` sit below the op families (they raise
# its exceptions and see the walk through the context); the walk and the registry above them (they call the families).
LAYERS = [
    ("kernels",),
    ("npu_sim.errors", "npu_sim.ir", "npu_sim.opset", "npu_sim.activations"),
    ("npu_sim.boards",),
    ("npu_sim.frontend", "npu_sim.qdq"),
    ("npu_sim.lowering.problem", "npu_sim.lowering.context"),
    ("npu_sim.ops",),
    ("npu_sim.lowering",),
    ("npu_sim.runtime",),
    ("npu_sim.analysis",),
    ("npu_sim.api",),
    ("npu_sim.render",),
    ("npu_sim.cli",),
]
# The package itself: its lazy __getattr__ names modules by string only; ``__version__`` is read by the CLI.
TOP = "npu_sim"
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(ROOT.glob("npu_sim/**/*.py")) + sorted(ROOT.glob("kernels/**/*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _layer(module: str) -> int:
    best, layer = -1, None
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, layer = len(name), i
    if layer is None:
        raise AssertionError(f"module {module} is in no layer: add it to LAYERS in tests/test_architecture.py")
    return layer


class _Import:
    def __init__(self, source: str, target: str, names: list[str], line: int, in_function: bool):
        self.source, self.target, self.names, self.line, self.in_function = source, target, names, line, in_function

    def __repr__(self) -> str:
        return f"{MODULES[self.source].relative_to(ROOT)}:{self.line} imports {self.target}"


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _imports() -> list[_Import]:
    found = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"

        def visit(node, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                if isinstance(child, ast.Import):
                    for alias in child.names:
                        found.append(_Import(module, alias.name, [], child.lineno, inner))
                elif isinstance(child, ast.ImportFrom):
                    target = _resolve(module, is_package, child.level, child.module)
                    found.append(_Import(module, target, [a.name for a in child.names], child.lineno, inner))
                visit(child, inner)
        visit(tree, False)
    return found


IMPORTS = _imports()


def _internal(target: str) -> str | None:
    """The project module an import names (``from npu_sim.ops import mac`` names ``npu_sim.ops.mac``)."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in IMPORTS:
        for target in [f"{imp.target}.{n}" for n in imp.names] or [imp.target]:
            t = _internal(target) or _internal(imp.target)
            if t and t != imp.source:
                edges[imp.source].add(t)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, comps, counter = {}, {}, set(), [], [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))
    return comps


def test_imports_point_down():
    upward = []
    for source, targets in _edges().items():
        if source == TOP:
            continue
        for target in targets:
            if target != TOP and _layer(target) > _layer(source):
                upward.append(f"{source} (layer {_layer(source)}) imports {target} (layer {_layer(target)})")
    assert not upward, "imports that point up:\n" + "\n".join(sorted(upward))


def test_no_import_circles():
    assert _cycles(_edges()) == []


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_kernels_import_nothing_from_npu_sim():
    bad = [imp for imp in IMPORTS if imp.source.startswith("kernels") and imp.target.startswith("npu_sim")]
    assert not bad, bad


def test_no_project_import_inside_a_function():
    bad = [imp for imp in IMPORTS if imp.in_function and _internal(imp.target)]
    assert not bad, "import at the top of the module (a cycle is a layering bug, not a reason):\n" + \
        "\n".join(map(repr, bad))


def test_no_private_name_imported_from_another_module():
    bad = [f"{imp!r}: {n}" for imp in IMPORTS if _internal(imp.target) for n in imp.names
           if n.startswith("_") and not n.startswith("__")]
    bad += [f"{imp!r}" for imp in IMPORTS if _internal(imp.target) and
            any(part.startswith("_") and not part.startswith("__") and part != "_jit"
                for part in imp.target.split(".")[1:])]
    assert not bad, "promote the name or move the code:\n" + "\n".join(bad)


def test_argparse_only_in_the_cli():
    bad = [imp for imp in IMPORTS if imp.target == "argparse" and not imp.source.startswith("npu_sim.cli")]
    assert not bad, bad


def test_files_and_functions_a_newcomer_can_read():
    long_files, long_functions = [], []
    for module, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        if lines > MAX_FILE_LINES:
            long_files.append(f"{path.relative_to(ROOT)}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long_functions.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines")
    assert not long_files and not long_functions, "\n".join(long_files + long_functions)


def _context_interface() -> set[str]:
    """The public names of ``npu_sim.lowering.context.LowerContext``: its methods and the attributes its
    ``__init__`` sets."""
    tree = ast.parse(MODULES["npu_sim.lowering.context"].read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LowerContext")
    names = {f.name for f in cls.body if isinstance(f, ast.FunctionDef)}
    init = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    for node in ast.walk(init):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                and isinstance(node.ctx, ast.Store)):
            names.add(node.attr)
    return {n for n in names if not n.startswith("_")}


def test_op_families_see_the_narrow_context_only():
    """Op families receive the walk's narrow side (``LowerContext``) as their ``lowering`` argument: every
    attribute they read from it is part of that interface (not the walk's maps, its problems or its graph)."""
    allowed = _context_interface()
    assert {"arith", "node_name", "const", "emit"} <= allowed, allowed
    wrong = []
    for module, path in MODULES.items():
        if not module.startswith("npu_sim.ops"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "lowering"
                    and node.attr not in allowed):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} lowering.{node.attr}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("code", [
    "import kernels, sys; assert not any(m.startswith('npu_sim') for m in sys.modules)",
    "import npu_sim, sys; assert 'numba' not in sys.modules and 'onnxruntime' not in sys.modules "
    "and 'onnx' not in sys.modules",
    "import sys; from npu_sim.cli.main import build_parser; build_parser(['--help']); "
    "assert 'numba' not in sys.modules and 'onnx' not in sys.modules",
])
def test_light_imports(code):
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_help_and_version_are_fast_to_load():
    for argv in (["--help"], ["--version"]):
        out = subprocess.run([sys.executable, "-X", "importtime", "-m", "npu_sim.cli", *argv], cwd=ROOT,
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        loaded = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}
        assert not {"numba", "onnx", "onnxruntime"} & loaded, argv


def _package(module: str) -> str:
    """The package a module belongs to: its directory under ``npu_sim/`` (``npu_sim.analysis.check``), or the entry
    of ``LAYERS`` that names it when that is narrower (``npu_sim.lowering.context``); a module directly in
    ``npu_sim/`` is its own (``npu_sim.ir``)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    if package == TOP:
        package = module
    for names in LAYERS:
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(package):
                package = name
    return package


# Package-level cycles that are known and owned elsewhere (none left).
KNOWN_PACKAGE_CYCLES: list[list[str]] = []


def test_no_package_import_cycles():
    """Packages import each other one way only (e.g. ``npu_sim.analysis.check`` may read
    ``npu_sim.analysis.cost``, never the reverse as well): Tarjan over the graph of packages."""
    edges: dict[str, set[str]] = {}
    for source, targets in _edges().items():
        if source == TOP:
            continue
        edges.setdefault(_package(source), set())
        for target in targets:
            if target != TOP and _package(target) != _package(source):
                edges[_package(source)].add(_package(target))
                edges.setdefault(_package(target), set())
    assert _cycles(edges) == KNOWN_PACKAGE_CYCLES, "packages that import each other:\n" + "\n".join(
        f"{a} -> {b}: " + ", ".join(sorted(f"{s} imports {t}" for s, ts in _edges().items() if _package(s) == a
                                           for t in ts if _package(t) == b))
        for comp in _cycles(edges) for a in comp for b in comp if b in edges[a])


# ---- the front door: an ONNX model is read in npu_sim.frontend only ------------------------------------------------
ONNX_READS = ("load", "load_model", "load_from_string", "load_model_from_string")
PARSERS = ("ParseFromString", "FromString")  # a ModelProto (or any protobuf message) parsed from bytes


def _onnx_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every ONNX read in ``tree``: a call of ``onnx.load``/``load_model``/``load_from_string``/
    ``load_model_from_string`` (``onnx`` under any alias), one of them imported by name from ``onnx``, and a
    protobuf ``ParseFromString``/``FromString`` call (``onnx.ModelProto().ParseFromString(data)``)."""
    aliases = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for a in node.names if a.name == "onnx"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "onnx":
            found += [(node.lineno, f"from onnx import {a.name}") for a in node.names if a.name in ONNX_READS]
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        func = node.func
        if func.attr in ONNX_READS and isinstance(func.value, ast.Name) and func.value.id in aliases:
            found.append((node.lineno, f"{func.value.id}.{func.attr}()"))
        elif func.attr in PARSERS:
            found.append((node.lineno, f".{func.attr}()"))
    return found


def _within(module: str, packages) -> bool:
    """True when ``module`` is one of ``packages`` or inside one of them."""
    return any(module == p or module.startswith(p + ".") for p in packages)


def _findings(finder, scope, describe=str) -> list[str]:
    """``path:line what`` for every hit ``(line, what)`` of ``finder`` (an AST walker) in the modules ``scope``
    accepts, ``what`` as ``describe`` words it."""
    return [f"{path.relative_to(ROOT)}:{line} {describe(what)}" for module, path in MODULES.items() if scope(module)
            for line, what in finder(ast.parse(path.read_text(encoding="utf-8")))]


def test_onnx_is_read_by_the_front_door_only():
    """Every model enters through ``npu_sim.frontend`` (``open_model``: read and validated once, then passed on as
    an ``OpenModel``); no other module reads ONNX bytes itself."""
    bad = _findings(_onnx_reads, lambda module: not _within(module, ("npu_sim.frontend",)))
    assert not bad, "open the model with npu_sim.frontend.reader.open_model instead:\n" + "\n".join(bad)


def test_onnx_read_finder_finds_reads():
    code = ("import onnx\nimport onnx as ox\nfrom onnx import load_model, helper\n"
            "a = onnx.load('m.onnx')\nb = ox.load_from_string(data)\nc = onnx.ModelProto()\nc.ParseFromString(data)\n"
            "d = onnx.helper.make_model(g)\ne = np.load('x.npy')\nf = onnx.load_model_from_string(data)\n"
            "g = onnx.ModelProto.FromString(data)\nh = json.load(fp)\nonnx.save(c, 'm.onnx')\n")
    assert sorted(_onnx_reads(ast.parse(code))) == [
        (3, "from onnx import load_model"), (4, "onnx.load()"), (5, "ox.load_from_string()"),
        (7, ".ParseFromString()"), (10, "onnx.load_model_from_string()"), (11, ".FromString()")]


# ---- private node parameters stay with the op families -----------------------------------------------------------
PARAMS_OWNERS = ("npu_sim.ops", "npu_sim.lowering")  # the families that write Node.params, the walk that calls them


def _params_aliases(tree: ast.AST) -> set[str]:
    """Names bound to a node's params anywhere in ``tree`` (``p = node.params``, ``p, m = node.params, node.memo``)."""
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = (zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple)
                     and isinstance(node.value, ast.Tuple) else [(target, node.value)])
            for name, value in pairs:
                if isinstance(name, ast.Name) and isinstance(value, ast.Attribute) and value.attr == "params":
                    names.add(name.id)
    return names


def _private_param_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, key) of every ``<x>.params["_key"]`` subscript and ``<x>.params.get("_key", ...)`` call in ``tree``,
    also through a name bound to ``<x>.params``."""
    aliases = _params_aliases(tree)

    def is_params(expr) -> bool:
        return ((isinstance(expr, ast.Attribute) and expr.attr == "params")
                or (isinstance(expr, ast.Name) and expr.id in aliases))
    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and is_params(node.value):
            key = node.slice
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and is_params(node.func.value) and node.args):
            key = node.args[0]
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("_"):
            found.append((node.lineno, key.value))
    return found


def test_private_node_params_read_by_their_families_only():
    """A ``_``-key of ``Node.params`` is a run function's own argument: outside ``npu_sim.ops`` and
    ``npu_sim.lowering`` a node is read through its typed records (``npu_sim.ir``: Requant, Weights, Tables, ...)."""
    bad = _findings(_private_param_reads, lambda module: not _within(module, PARAMS_OWNERS),
                    lambda key: f"reads params[{key!r}]")
    assert not bad, "read the node's typed record instead:\n" + "\n".join(bad)


def test_private_param_finder_finds_reads():
    code = ('a = node.params["_w"]\nb = n.params.get("_in_q")\nc = node.params["mult"]\nd = params["_x"]\n'
            'e = node.params.get("qmin", 0)\np, m = node.params, node.memo\nf = p.get("_a")\ng = p["_b"]\n')
    assert sorted(_private_param_reads(ast.parse(code))) == [(1, "_w"), (2, "_in_q"), (7, "_a"), (8, "_b")]


# ---- the analyses read op facts (npu_sim.opset) and the nodes' records, not op names ------------------------------
# The modules converted so far; the others join the list as they are converted.
OP_FACT_READERS = ("npu_sim.analysis.cost", "npu_sim.analysis.advisor", "npu_sim.analysis.accuracy",
                   "npu_sim.analysis.check", "npu_sim.runtime.simulator")


def _strings(expr) -> bool:
    """A string constant, or a tuple/list/set (or frozenset/set/tuple call) of string constants."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, str)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("frozenset", "set", "tuple") \
            and len(expr.args) == 1:
        return _strings(expr.args[0])
    return isinstance(expr, (ast.Tuple, ast.List, ast.Set)) and bool(expr.elts) and all(map(_strings, expr.elts))


def _op_name_tests(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, source) of every comparison of an op (``<x>.op``, or a name bound to one: ``op = node.op``) with op
    names: a string, a collection of strings, or a name this module binds to such a collection."""
    named = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and _strings(n.value)
             for t in n.targets if isinstance(t, ast.Name)}
    aliases = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute)
               and n.value.attr == "op" for t in n.targets if isinstance(t, ast.Name)}

    def is_op(expr) -> bool:
        return (isinstance(expr, ast.Attribute) and expr.attr == "op") or (isinstance(expr, ast.Name)
                                                                             and expr.id in aliases)

    def is_names(expr) -> bool:
        return _strings(expr) or (isinstance(expr, ast.Name) and expr.id in named)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(map(is_op, operands)) and any(map(is_names, operands)):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_converted_analyses_test_op_facts_not_op_names():
    """An analysis asks ``npu_sim.opset`` what an op is (``facts_of(op).transposed``, ``kind_of(op) == "mac"``)
    and reads the node's records, so that a new op is one entry in the opset, not an edit in every analysis."""
    bad = _findings(_op_name_tests, lambda module: _within(module, OP_FACT_READERS))
    assert not bad, "test an op fact of npu_sim.opset (OpFacts) instead of the op's name:\n" + "\n".join(bad)


def test_op_name_test_finder_finds_tests():
    code = ("FOLDS = ('Conv', 'MaxPool')\nif node.op == 'Conv': pass\nif n.op in ('Softmax', 'LayerNorm'): pass\n"
            "if node.op not in FOLDS: pass\nop = node.op\nif op != 'Gemm': pass\nif kind_of(node.op) == 'mac': pass\n"
            "if facts_of(node.op).window: pass\nif b.op != n.op: pass\nif node.op in VIEW_OPS: pass\n"
            "if 'Conv' == x.op: pass\nif node.op in frozenset({'Pad'}): pass\n")
    assert [line for line, _ in _op_name_tests(ast.parse(code))] == [2, 3, 4, 6, 11, 12]
