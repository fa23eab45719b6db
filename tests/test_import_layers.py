"""The import graph of `prover/`, `npu_backend/` and `compiler/`: no cycle, and every edge
goes the way DESIGN.md ("The three packages (and who may import whom)") draws the layers.

The graph is computed from the source with `ast`, not by importing anything:

- every `import` and `from ... import` statement counts, at module level and inside
  functions, methods and branches (a function-level import runs as soon as the function
  does, so a cycle through one is a cycle), and so does a call `importlib.import_module`
  or `prover.lazy.lazy_module` with a literal module name (a name computed at run time,
  as `prover check --format` picks its report writer, cannot be seen);
- relative imports are resolved against the importing module's package; `from p import x`
  is an edge to the module `p.x` when there is one, else to `p`;
- imports under `if TYPE_CHECKING:` are excluded: they never run (annotations only), so
  they cannot make an import cycle;
- `import a.b.c` is an edge to `a.b.c` only, not to the packages `a` and `a.b` it also
  initialises: the packages' `__init__.py` files import nothing (checked below), so an
  edge to one can never close a cycle.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("prover", "npu_backend", "compiler", "npuc")

# Who may import whom. For an importing module, the entry of its longest matching prefix
# lists the prefixes it may import (a prefix matches a module or its submodules).
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    # the semantics kernel and decision procedures: nothing of ONNX or of any target
    "prover": ("prover",),
    # the target: described, and its instructions given meaning, in prover primitives
    "npu_backend": ("npu_backend", "prover"),
    "compiler": ("compiler", "prover", "npu_backend"),
    # The IR stands on its own: nothing from the frontend, the passes, proving or ORT.
    # It may read npu_backend (DESIGN.md draws compiler -> npu_backend): a fused node's
    # postprocessing is the target's descriptor (`npu_backend.postprocess`), the frozen
    # config carries the `Target`, and the one NPU step builder (`ir/npu_step.py`) makes
    # the backend's `NpuMatMul` that legality validates and lowering emits, so the IR
    # speaks the target's types instead of copying them. `compiler.errors` is the
    # compiler's leaf module of exception types.
    "compiler.ir": ("compiler.ir", "compiler.errors", "prover", "npu_backend"),
    # `python -m prover` / `python -m npuc`: entry points that run the app's commands (no
    # module imports an entry point, so the kernel still depends on nothing above it)
    "prover.__main__": ("compiler.cli.prover",),
    "npuc": ("compiler.cli.npuc",),
}
# Edges MAY_IMPORT allows but the design does not: (importer prefix, imported prefix, why).
MUST_NOT_IMPORT: tuple[tuple[str, str, str], ...] = (
    (
        "compiler.ir.reasons",
        "compiler.passes",
        "the reason-text registry does not import the rules (they register where defined)",
    ),
)
# Inside compiler/, bottom to top: a module of one layer imports nothing of a later one
# (the errors; the IR; the ONNX Runtime side, which reads the IR; the frontend, building IR
# with ORT's help; what the passes share to prove; the passes). The application on top
# (api, cli, report, regress) may use them all.
COMPILER_LAYERS: tuple[str, ...] = (
    "compiler.errors",
    "compiler.ir",
    "compiler.ort",
    "compiler.frontend",
    "compiler.proving",
    "compiler.passes",
)
# Packages whose modules do not import each other, and the modules exempt from that (the
# pipeline lists the passes in their order).
INDEPENDENT_MODULES: dict[str, tuple[str, ...]] = {
    "compiler.passes": ("compiler.passes.pipeline",),
}


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def module_name(root: Path, path: Path) -> str:
    """The dotted name of source file `path` under `root` (a package: its `__init__`)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@dataclass(frozen=True)
class _Imports(ast.NodeVisitor):
    """Collects the modules (of `known`) one source file imports."""

    package: str  # the package relative imports start from
    known: frozenset[str]
    found: set[str]

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            if node.level - 1 > len(base):
                return
            base = base[: len(base) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        for alias in node.names:
            sub = f"{module}.{alias.name}"
            self._add(sub if sub in self.known else module)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        if name in ("import_module", "lazy_module") and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                self._add(arg.value)
        self.generic_visit(node)

    def _add(self, module: str) -> None:
        if module in self.known:
            self.found.add(module)


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """Module -> the modules of `packages` (under `root`) it imports (see the docstring)."""
    files = {
        module_name(root, p): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))
    }
    known = frozenset(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        _Imports(package, known, found).visit(ast.parse(path.read_text(), str(path)))
        graph[name] = found - {name}
    return graph


def tangles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (each holds a cycle), sorted."""
    g = nx.DiGraph((a, b) for a, bs in graph.items() for b in bs)
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected set: a closed path `a -> ... -> a` starting at its
    first module in sorted order."""
    g = nx.DiGraph((a, b) for a, bs in graph.items() for b in bs)
    out = []
    for members in tangles(graph):
        path = [a for a, _ in nx.find_cycle(g.subgraph(members), source=members[0])]
        out.append([*path, path[0]])
    return out


def _layer(module: str) -> int | None:
    return next((i for i, p in enumerate(COMPILER_LAYERS) if _within(module, p)), None)


def _why_not(a: str, b: str) -> list[str]:
    """The rules edge `a -> b` breaks (empty: it is allowed)."""
    why = []
    rule = max((p for p in MAY_IMPORT if _within(a, p)), key=len, default=None)
    if rule is not None and not any(_within(b, p) for p in MAY_IMPORT[rule]):
        why.append(f"{rule} may import only {', '.join(MAY_IMPORT[rule])}")
    la, lb = _layer(a), _layer(b)
    if la is not None and lb is not None and lb > la:
        why.append(f"{COMPILER_LAYERS[la]} is below {COMPILER_LAYERS[lb]}")
    why += [w for src, dst, w in MUST_NOT_IMPORT if _within(a, src) and _within(b, dst)]
    for pkg, exempt in INDEPENDENT_MODULES.items():
        if a.rpartition(".")[0] == pkg == b.rpartition(".")[0] and a not in exempt:
            why.append(f"modules of {pkg} do not import each other")
    return why


def forbidden(graph: Mapping[str, set[str]]) -> list[str]:
    """Every edge that breaks MAY_IMPORT, COMPILER_LAYERS, MUST_NOT_IMPORT or
    INDEPENDENT_MODULES, as "a -> b: why; why"."""
    out = []
    for a, bs in sorted(graph.items()):
        for b in sorted(bs):
            why = _why_not(a, b)
            if why:
                out.append(f"{a} -> {b}: {'; '.join(why)}")
    return out


GRAPH = import_graph(ROOT, PACKAGES)


def test_no_import_cycles():
    found = [
        f"{' -> '.join(c)} (one cycle among {len(t)} modules: {', '.join(t)})"
        for c, t in zip(cycles(GRAPH), tangles(GRAPH), strict=True)
    ]
    assert not found, "import cycles:\n" + "\n".join(found)


def test_imports_follow_the_layers():
    bad = forbidden(GRAPH)
    assert not bad, "forbidden imports:\n" + "\n".join(bad)


def test_the_graph_covers_the_three_packages():
    assert {m.split(".")[0] for m in GRAPH} == set(PACKAGES)
    assert len(GRAPH) > 100 and sum(map(len, GRAPH.values())) > 300
    # an edge known to exist at module level and one only inside a function
    assert "prover.terms" in GRAPH["prover.synthesis"]
    assert "compiler.ir.structure" in GRAPH["compiler.passes.legality"]


def test_package_inits_import_nothing():
    """Why an import of `a.b.c` need not count the packages `a`, `a.b` it initialises."""
    inits = {m for m in GRAPH if (ROOT / m.replace(".", "/") / "__init__.py").is_file()}
    assert "compiler.ir" in inits and not {m: GRAPH[m] for m in inits if GRAPH[m]}


def _tree(root: Path, files: Mapping[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checker_finds_a_planted_cycle(tmp_path):
    """a -> b at module level, b -> c inside a method, c -> a inside a function by a
    relative import: one cycle. The TYPE_CHECKING import c -> d -> c closes none."""
    root = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from . import b\n",
            "pkg/b.py": "class K:\n    def m(self):\n        import pkg.sub.c as c\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/c.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from .d import D\n"
                "def f():\n    from ..a import x\n"
            ),
            "pkg/sub/d.py": "from pkg.sub import c\n",
        },
    )
    graph = import_graph(root, ["pkg"])
    assert graph["pkg.sub.c"] == {"pkg.a"}  # not pkg.sub.d
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]
    assert cycles({**graph, "pkg.sub.c": set()}) == []


def test_the_checker_finds_each_forbidden_direction(tmp_path):
    root = _tree(
        tmp_path,
        {
            "prover/__init__.py": "",
            "prover/k.py": "from compiler.ir import graph\n",
            "npu_backend/__init__.py": "",
            "npu_backend/t.py": "import prover.k\nfrom compiler.api import compile_model\n",
            "compiler/__init__.py": "",
            "compiler/api.py": "from compiler.passes import pipeline\n",
            "compiler/ir/__init__.py": "",
            "compiler/ir/graph.py": "import npu_backend.t, prover.k\n",
            "compiler/ir/reasons.py": "def f():\n    import compiler.passes.gate\n",
            "compiler/ir/site.py": "from compiler.ort.host import run\n",
            "compiler/ort/__init__.py": "",
            "compiler/ort/host.py": "from compiler.ir import graph\n",
            "compiler/ort/tables.py": "from compiler.proving import prove\n",
            "compiler/proving/__init__.py": "",
            "compiler/proving/prove.py": "from compiler.ort import tables\n",
            "compiler/passes/__init__.py": "",
            "compiler/passes/gate.py": "from compiler.ir.graph import x\n",
            "compiler/passes/lower.py": "from .gate import obligations\n",
            "compiler/passes/pipeline.py": "from compiler.passes import gate, lower\n",
        },
    )
    bad = forbidden(import_graph(root, ["prover", "npu_backend", "compiler"]))
    assert [b.split(":")[0] for b in bad] == [
        "compiler.ir.reasons -> compiler.passes.gate",
        "compiler.ir.site -> compiler.ort.host",
        "compiler.ort.tables -> compiler.proving.prove",
        "compiler.passes.lower -> compiler.passes.gate",
        "npu_backend.t -> compiler.api",
        "prover.k -> compiler.ir.graph",
    ]
    reasons, site, tables, lower = bad[:4]
    assert "may import only" in reasons and "does not import the rules" in reasons
    assert "compiler.ir is below compiler.ort" in site
    assert tables.endswith("compiler.ort is below compiler.proving")
    assert lower.endswith("modules of compiler.passes do not import each other")


@pytest.mark.parametrize(
    "source",
    [
        "import compiler.ir.graph",
        "import compiler.ir.graph as g",
        "from compiler.ir import graph",
        "from compiler.ir.graph import Graph",
        "from .graph import Graph",
        "from . import graph",
        "def f():\n    from .graph import Graph",
        "if x:\n    pass\nelse:\n    import compiler.ir.graph",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\nelse:\n"
        "    import compiler.ir.graph",
        "import importlib\nm = importlib.import_module('compiler.ir.graph')",
    ],
)
def test_the_checker_sees_every_import_form(tmp_path, source):
    root = _tree(
        tmp_path,
        {
            "compiler/__init__.py": "",
            "compiler/ir/__init__.py": "",
            "compiler/ir/graph.py": "",
            "compiler/ir/site.py": source + "\n",
        },
    )
    assert import_graph(root, ["compiler"])["compiler.ir.site"] == {"compiler.ir.graph"}


def _fresh(code: str) -> list[str]:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-800:]
    return p.stdout.splitlines()


def test_a_host_node_runs_once_its_evaluator_is_registered():
    """The IR does not import ORT: `compiler.ort.host` registers the `host_onnx` evaluator.
    Without it a host node is an InternalError naming the module; the frontend that builds
    host nodes loads it, so `to_ir` then `run_graph` works in a fresh process."""
    out = _fresh(
        "import numpy as np\n"
        "from compiler.ir.graph import Graph, Node, Value\n"
        "from compiler.ir.semantics import run_graph\n"
        "g = Graph({'x': Value('x', 'float32', (1,)), 'y': Value('y', 'float32', (1,))},\n"
        "          [Node('h', 'host_onnx', ['x'], ['y'], {})], ['x'], ['y'], {'': 13})\n"
        "try:\n"
        "    run_graph(g, {'x': np.zeros(1, np.float32)})\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
        "from compiler.frontend.reader import to_ir\n"
        "g, _ = to_ir('examples/ort_quantized_qdq_matmul_sigmoid.onnx')\n"
        "x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)\n"
        "print(any(n.op == 'host_onnx' for n in g.nodes), run_graph(g, {'X': x})['Y'].shape)\n"
    )
    assert out[0].startswith("InternalError ") and "compiler.ort.host" in out[0]
    assert out[1] == "True (1, 8)"


def test_the_config_resolves_ort_host_only_with_the_apps_resolver():
    """`CompileConfig.build` (IR) knows the prover's named profiles; `ort-host` probes this
    machine's ORT, which the app's resolver (`compiler.ort.reference_host`) does."""
    from compiler.ir.context import CompileConfig
    from compiler.ort.reference_host import host_profile, resolve_reference
    from prover.reference import DEFAULT_PROFILE

    assert CompileConfig.build().reference.name == DEFAULT_PROFILE
    with pytest.raises(ValueError, match="resolve_reference"):
        CompileConfig.build(reference="ort-host")
    cfg = CompileConfig.build(reference="ort-host", resolve_reference=resolve_reference)
    assert cfg.reference == host_profile()
