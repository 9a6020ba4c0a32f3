#!/usr/bin/env python3
"""No import circles between the files of src/ (`make lint`): a file may
not import, directly or through others, a file that imports it back.

Reads every `crate::`, `super::` and `self::` path in src/*.rs, and
every path that starts with a child module's name (`use` trees, braces
expanded, and paths written inline), tests included,
resolves each to the file that holds the module it names (following
`mod` declarations, inline modules too), and fails on every strongly
connected group of two or more files, printing the imports that close
it. A file that declares modules reaches down into them (dispatching to
them, re-exporting them): those edges, parent file to its own
descendants' files, are not counted, the child's `super::` ones are.
Python 3 stdlib only.

Usage: python3 dev/import_cycles.py [--strict] [src-dir]
(--strict counts a parent file's edges into its own children too: it
shows the parent/child circles, such as algo/mod.rs with each algorithm,
that the default allows.)
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TOKEN = re.compile(
    r"""
      (?P<comment>//[^\n]*|/\*.*?\*/)
    | (?P<raw>b?r(?P<hashes>\#*)"(?:.|\n)*?"(?P=hashes))
    | (?P<string>b?"(?:\\.|[^"\\])*")
    | (?P<char>b?'(?:\\.|\\u\{[0-9a-fA-F]+\}|[^'\\\n])')
    """,
    re.X | re.S,
)
MOD_DECL = re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*([;{])")
USE = re.compile(r"\buse\s+([^;]*);")
PATH = re.compile(r"(?<![\w:])(\w+(?:\s*::\s*\w+)+)")


def strip(text):
    """The code without comments, strings and chars (newlines kept)."""

    def blank(m):
        return "".join("\n" if c == "\n" else " " for c in m.group(0))

    return TOKEN.sub(blank, text)


def expand(tree):
    """A `use` tree -> its paths, e.g. `a::{b, c::{self, D}}` -> a::b,
    a::c::self, a::c::D (renames dropped)."""
    tree = re.sub(r"\s+", " ", tree).strip()
    depth, start, parts = 0, 0, []
    brace = None
    for i, c in enumerate(tree):
        if c == "{":
            if depth == 0:
                brace = i
            depth += 1
        elif c == "}":
            depth -= 1
    if brace is None:
        return [re.sub(r"\s+as\s+\w+$", "", tree).replace(" ", "")]
    prefix = tree[:brace].strip()
    inner = tree[brace + 1 : tree.rindex("}")]
    depth = 0
    for i, c in enumerate(inner):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    parts.append(inner[start:])
    out = []
    for part in parts:
        if part.strip():
            out += [prefix + sub for sub in expand(part)]
    return out


def module_of(path, src):
    """src/a/b.rs or src/a/b/mod.rs -> ("a", "b"); src/lib.rs -> ()."""
    rel = os.path.relpath(path, src)[: -len(".rs")].split(os.sep)
    if rel == ["lib"]:
        return ()
    if rel[-1] == "mod":
        rel = rel[:-1]
    return tuple(rel)


def scan(src):
    """Module path -> its file; the same with inline modules (owner); and
    file -> [(module path at the use, path)]."""
    files = {}
    for dirpath, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(dirpath, name)
                files[module_of(path, src)] = path
    owner = dict((mod, path) for mod, path in files.items())
    uses = {}
    for mod, path in files.items():
        code = strip(open(path, encoding="utf-8").read())
        # Inline modules: the module path at every offset.
        spans = []
        for m in MOD_DECL.finditer(code):
            if m.group(2) == "{":
                depth, i = 1, m.end()
                while depth and i < len(code):
                    depth += {"{": 1, "}": -1}.get(code[i], 0)
                    i += 1
                spans.append((m.start(), i, m.group(1)))
                owner.setdefault(mod + (m.group(1),), path)

        def at(offset):
            inner = [s for s in spans if s[0] <= offset < s[1]]
            inner.sort()
            return mod + tuple(name for _, _, name in inner)

        found = []
        for m in USE.finditer(code):
            for p in expand(m.group(1)):
                found.append((at(m.start()), p))
        code_no_use = USE.sub(lambda m: " " * len(m.group(0)), code)
        for m in PATH.finditer(code_no_use):
            found.append((at(m.start()), re.sub(r"\s+", "", m.group(1))))
        uses[path] = found
    return files, owner, uses


def resolve(owner, here, path):
    """The file holding the deepest module `path` names from `here`."""
    segs = path.split("::")
    if segs[0] == "crate":
        mod, segs = (), segs[1:]
    elif segs[0] in ("super", "self"):
        mod = here
        while segs and segs[0] in ("super", "self"):
            mod = mod[:-1] if segs[0] == "super" else mod
            segs = segs[1:]
    elif here + (segs[0],) in owner:
        mod = here  # a child module, named bare
    else:
        return None  # another crate, a type's item, a local
    for seg in segs:
        if mod + (seg,) in owner:
            mod = mod + (seg,)
        else:
            break
    return owner.get(mod)


def cycles(graph):
    """Tarjan's strongly connected components of two or more nodes."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    argv = sys.argv[1:]
    strict = "--strict" in argv
    argv = [a for a in argv if a != "--strict"]
    src = argv[0] if argv else os.path.join(ROOT, "src")
    files, owner, uses = scan(src)
    files = dict((path, mod) for mod, path in files.items())
    graph, why = {}, {}
    for path, found in uses.items():
        for here, p in found:
            target = resolve(owner, here, p)
            below = bool(target) and not strict and files[target][: len(files[path])] == files[path]
            if target and target != path and not below:
                graph.setdefault(path, set()).add(target)
                why.setdefault((path, target), p)
    groups = cycles(graph)
    rel = lambda p: os.path.relpath(p, ROOT)
    for group in groups:
        print("import circle: " + ", ".join(rel(p) for p in group))
        for a in group:
            for b in group:
                if b in graph.get(a, ()):
                    print(f"  {rel(a)} -> {rel(b)} ({why[(a, b)]})")
    if groups:
        sys.exit(1)
    edges = sum(len(v) for v in graph.values())
    print(f"no import circles: {len(uses)} files, {edges} imports between them")


if __name__ == "__main__":
    main()
