#!/usr/bin/env python3
"""Finds import cycles inside the client packages: among the Python
package's modules (clients/python/src/valkey_ratelimit) and among the Node
package's files (clients/node, relative require/import). Exits 1 if any.

    python3 dev/package_import_cycles.py            # both packages
    python3 dev/package_import_cycles.py --python clients/python/src/valkey_ratelimit --node clients/node

Python: every import statement counts, a function's lazy import too (it
closes the same circle, only later); imports under ``if TYPE_CHECKING:``
do not (they never run). Importing a submodule is not counted as importing
its package's __init__: Python runs that first whatever the module says.
Node: require("./x"), import ... from "./x", import("./x") and
export ... from "./x" of relative paths, resolved as Node does (.js,
.cjs, .mjs, .ts, a directory's package.json main or index.js); packages
from node_modules are outside the graph. Only the standard library."""

from __future__ import annotations

import argparse
import ast
import json
import os
import pathlib
import re
import sys
from typing import Dict, Iterator, List, Optional, Set, Tuple

REPO = pathlib.Path(__file__).resolve().parents[1]


def shown(path: pathlib.Path) -> str:
    """A path as printed: relative to the repository when inside it."""
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)

# An edge: (importer, imported) -> where (file:line and how).
Edges = Dict[Tuple[str, str], str]


# --- Python -----------------------------------------------------------------------


def python_modules(package: pathlib.Path) -> Dict[str, pathlib.Path]:
    """Dotted module name -> file, for the package and its subpackages."""
    root = package.parent
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, in_function: bool = False) -> Iterator[Tuple[ast.stmt, bool]]:
    """Import statements that run, and whether inside a function."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for other in node.orelse:
                yield from _imports(ast.Module(body=[other], type_ignores=[]), in_function)
        else:
            inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from _imports(node, inner)


def python_edges(package: pathlib.Path) -> Tuple[List[str], Edges]:
    modules = python_modules(package)
    edges: Edges = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        here = name.split(".") if is_package else name.split(".")[:-1]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, lazy in _imports(tree):
            targets: List[str] = []
            if isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    known = [".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in modules]
                    targets += known[:1]
            else:
                base = here[: len(here) - node.level + 1] if node.level else []
                stem = ".".join(base + (node.module.split(".") if node.module else []))
                for alias in node.names:
                    if f"{stem}.{alias.name}" in modules:
                        targets.append(f"{stem}.{alias.name}")
                    elif stem in modules:
                        targets.append(stem)
            where = f"{shown(path)}:{node.lineno}"
            for target in targets:
                if target != name:
                    edges.setdefault((name, target), where + (" (in a function)" if lazy else ""))
    return sorted(modules), edges


# --- Node -------------------------------------------------------------------------

SPECIFIER = re.compile(
    r"""(?:\brequire\s*\(\s*|\bimport\s*\(\s*|\bfrom\s+|^\s*import\s+)(["'])(\.{1,2}(?:/[^"']*)?)\1""",
    re.MULTILINE,
)
BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
LINE_COMMENT = re.compile(r"^\s*//.*$", re.MULTILINE)
SOURCE_SUFFIXES = (".js", ".cjs", ".mjs", ".ts")


def node_files(package: pathlib.Path) -> List[pathlib.Path]:
    found = []
    for directory, subdirectories, files in os.walk(package):
        subdirectories[:] = sorted(d for d in subdirectories if d != "node_modules")
        found += [pathlib.Path(directory, f) for f in files if f.endswith(SOURCE_SUFFIXES) and not f.endswith(".d.ts")]
    return sorted(found)


def resolve_node(base: pathlib.Path) -> Optional[pathlib.Path]:
    """What require() finds for a relative path, as a file."""
    if base.is_file():
        return base
    for suffix in SOURCE_SUFFIXES:
        if base.with_name(base.name + suffix).is_file():
            return base.with_name(base.name + suffix)
    if base.is_dir():
        manifest = base / "package.json"
        if manifest.is_file():
            main = json.loads(manifest.read_text(encoding="utf-8")).get("main")
            if main:
                found = resolve_node(base / main)
                if found:
                    return found
        for suffix in SOURCE_SUFFIXES:
            if (base / f"index{suffix}").is_file():
                return base / f"index{suffix}"
    return None


def node_edges(package: pathlib.Path) -> Tuple[List[str], Edges]:
    files = node_files(package)
    names = {f: str(f.relative_to(package)) for f in files}
    edges: Edges = {}
    for path in files:
        text = path.read_text(encoding="utf-8")
        # Blank the comments, keeping the lines where they were.
        text = BLOCK_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        text = LINE_COMMENT.sub("", text)
        for match in SPECIFIER.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            target = resolve_node((path.parent / match.group(2)).resolve())
            if target is None:
                raise SystemExit(f"{path}:{line}: {match.group(2)!r} resolves to no file")
            if target in names:
                edges.setdefault((names[path], names[target]), f"{shown(path)}:{line}")
    return sorted(names.values()), edges


# --- cycles -----------------------------------------------------------------------


def strongly_connected(nodes: List[str], edges: Edges) -> List[List[str]]:
    """Tarjan's components of more than one node, or of one that imports itself."""
    after: Dict[str, List[str]] = {n: [] for n in nodes}
    for a, b in edges:
        after[a].append(b)
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in after[v]:
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
            if len(component) > 1 or (v, v) in edges:
                found.append(sorted(component))

    for n in nodes:
        if n not in index:
            visit(n)
    return found


def one_cycle(component: List[str], edges: Edges) -> List[str]:
    """A shortest cycle through the component's first node."""
    inside = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for a in frontier:
            for (x, b) in edges:
                if x != a or b not in inside:
                    continue
                if b == start:
                    return paths[a] + [start]
                if b not in paths:
                    paths[b] = paths[a] + [b]
                    nxt.append(b)
        frontier = nxt
    return [start, start]


def report(label: str, nodes: List[str], edges: Edges) -> int:
    lazy = sum(1 for w in edges.values() if w.endswith("(in a function)"))
    components = strongly_connected(nodes, edges)
    counted = f"{len(nodes)} modules, {len(edges)} imports between them" + (f" ({lazy} in a function)" if lazy else "")
    if not components:
        print(f"{label}: {counted}: no cycle")
        return 0
    print(f"{label}: {counted}: {len(components)} {'cycle' if len(components) == 1 else 'cycles'}")
    for component in components:
        cycle = one_cycle(component, edges)
        print(f"  among {', '.join(component)}; one of them:")
        for a, b in zip(cycle, cycle[1:]):
            print(f"    {a} -> {b}  ({edges[(a, b)]})")
    return len(components)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", type=pathlib.Path, action="append", help="a Python package directory (default: clients/python/src/valkey_ratelimit)")
    parser.add_argument("--node", type=pathlib.Path, action="append", help="a Node package directory (default: clients/node)")
    args = parser.parse_args()
    if not args.python and not args.node:
        args.python = [REPO / "clients/python/src/valkey_ratelimit"]
        args.node = [REPO / "clients/node"]
    cycles = 0
    for package in args.python or []:
        cycles += report(f"python {shown(package.resolve())}", *python_edges(package.resolve()))
    for package in args.node or []:
        cycles += report(f"node {shown(package.resolve())}", *node_edges(package.resolve()))
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
