"""The package's layout keeps its architecture readable: one home per concept, no import circles.

The graph is "top-level package (or module) imports top-level package", from every `import`
statement, those inside functions included; only imports under `if TYPE_CHECKING:` (never run)
are left out. `rfthpc/__init__.py` lists the packages in layers: each may import only those listed
before it (or beside it, in its own row).
"""

from __future__ import annotations

import ast
import re
from collections import Counter, defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rfthpc"
OUTSIDE_LAYERS = {"__init__", "__main__"}
"""Nodes the layer table does not list: the package's own `__init__` and `python -m rfthpc`."""
MAX_TOP_LEVEL_MODULES = 5
"""Modules directly in rfthpc/, besides __init__, __main__ and cli."""
MAX_PACKAGE_SHARE = 0.15
"""The largest share of the package's lines one subpackage may hold."""


def _node(parts: list[str]) -> str:
    """The top-level node of a module path inside the package (`["store", "reader"]` -> store)."""
    return parts[0] if parts else "__init__"


def _under_type_checking(parents: list[ast.AST]) -> bool:
    for p in parents:
        if isinstance(p, ast.If):
            test = p.test
            if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
                    (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
                return True
    return False


def _imported(node: ast.Import | ast.ImportFrom, module: list[str], is_package: bool) -> list[list[str]]:
    """The package-relative paths an import statement of `module` names (nothing outside rfthpc)."""
    if isinstance(node, ast.Import):
        return [a.name.split(".")[1:] for a in node.names if a.name.split(".")[0] == "rfthpc"]
    if node.level:
        base = module if is_package else module[:-1]
        base = base[:len(base) - (node.level - 1)]
    elif node.module and node.module.split(".")[0] == "rfthpc":
        base = []
    else:
        return []
    target = base + (node.module.split(".")[0 if node.level else 1:] if node.module else [])
    # `from rfthpc import store` and `from . import reader` import the named modules.
    return [target] if node.module and target else [[*target, a.name] for a in node.names]


def imports(source: str, module: list[str], is_package: bool = False) -> list[tuple[list[str], int]]:
    """(package-relative path, line) of every import of rfthpc in `source`, the code of `module`,
    those inside functions included, those under `if TYPE_CHECKING:` left out."""
    found = []
    stack: list[tuple[ast.AST, list[ast.AST]]] = [(ast.parse(source), [])]
    while stack:
        current, parents = stack.pop()
        stack += [(child, [*parents, current]) for child in ast.iter_child_nodes(current)]
        if isinstance(current, (ast.Import, ast.ImportFrom)) and not _under_type_checking(parents):
            found += [(target, current.lineno) for target in _imported(current, module, is_package)]
    return found


def import_graph() -> tuple[dict[str, dict[str, list[str]]], Counter[str]]:
    """({node: {imported node: [where]}}, lines per node)."""
    edges: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    lines: Counter[str] = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = list(path.relative_to(PACKAGE).with_suffix("").parts)
        is_package = rel[-1] == "__init__"
        module = rel[:-1] if is_package else rel
        source = path.read_text()
        node = _node(rel)
        lines[node] += source.count("\n")
        for target, line in imports(source, module, is_package):
            if _node(target) != node:
                edges[node][_node(target)].append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    return edges, lines


def circles(edges: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(set(edges) | {w for targets in edges.values() for w in targets}):
        if v not in index:
            visit(v)
    return found


def layers() -> dict[str, int]:
    """Each node's row in the layer table of rfthpc/__init__.py's docstring."""
    doc = ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text())) or ""
    rows = [line for line in doc.splitlines() if line.startswith("| `")]
    return {name: i for i, row in enumerate(rows) for name in re.findall(r"`(\w+)`", row.split("|")[1])}


def test_no_package_imports_in_a_circle() -> None:
    edges, _ = import_graph()
    found = circles(edges)
    detail = [f"{a} -> {b}: {edges[a][b][:3]}" for c in found for a in c for b in edges[a] if b in c]
    assert not found, f"import circles {found}:\n" + "\n".join(detail)


def test_packages_import_only_the_layers_listed_before_them() -> None:
    edges, lines = import_graph()
    row = layers()
    unlisted = sorted(set(lines) - set(row) - OUTSIDE_LAYERS)
    assert not unlisted, f"{unlisted}: not in the layer table of rfthpc/__init__.py; add each to its layer"
    upward = [f"{a} -> {b}: {where[:3]}" for a, targets in edges.items() if a not in OUTSIDE_LAYERS
              for b, where in targets.items() if b not in OUTSIDE_LAYERS and row[b] > row[a]]
    assert not upward, "imports of a later layer (move the code, or the package's row):\n" + "\n".join(upward)


def test_config_imports_no_component() -> None:
    """Components check their own settings (`rfthpc.config.validate.COMPONENT_CHECKS`): the config
    imports only the algorithm declarations, the other frameworks' dialects and the base modules."""
    edges, _ = import_graph()
    assert set(edges["config"]) <= {"algorithms", "dialects", "errors", "not_built", "registry"}, dict(edges["config"])


def test_few_modules_at_the_top() -> None:
    loose = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in {"__init__", "__main__", "cli"})
    assert len(loose) <= MAX_TOP_LEVEL_MODULES, loose


def test_no_package_holds_more_than_its_share_of_the_lines() -> None:
    _, lines = import_graph()
    total = sum(lines.values())
    big = {n: f"{c / total:.1%}" for n, c in lines.items() if (PACKAGE / n).is_dir() and c > MAX_PACKAGE_SHARE * total}
    assert not big, big


def test_no_public_class_name_is_defined_twice() -> None:
    defined: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "compat":
            continue  # Trinity-RFT's API under Trinity's names (Task, Experience), for its plugins: by design
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                defined[node.name].append(str(path.relative_to(PACKAGE.parent)))
    twice = {name: where for name, where in defined.items() if len(where) > 1}
    assert not twice, twice


def test_the_graph_sees_imports_inside_functions_and_not_under_type_checking() -> None:
    """The graph's own reading, on a small example: a function's import counts, a type-only one does not."""
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rfthpc.trainer import x\n"
              "import rfthpc.signals\nfrom rfthpc import weights\n"
              "def f():\n    from rfthpc.store.reader import y\n    from . import rollout\n    from .sync import z\n")
    found = sorted(target for target, _ in imports(source, ["explorer", "loop"]))
    assert found == [["explorer", "rollout"], ["explorer", "sync"], ["signals"], ["store", "reader"], ["weights"]]
