#!/usr/bin/env python3
"""Prints the module import graph of a crate's src/ as strongly connected components.

Usage: scripts/modgraph.py [node/src] [--edges]

An edge A -> B means a file of module A names `crate::B..` (in a `use` or a path) or
`super::..` resolving to B. Modules are files (a folder's `mod.rs`/`foo.rs` is `foo`);
child test modules (`foo/tests.rs`) count as part of `foo`. Components are printed largest
first; a component of one file is not a circle.
"""
import os
import re
import sys


def modules(src):
    """Module path (tuple) -> file, for every .rs under src."""
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)[:-3].split(os.sep)
            if rel == ["lib"] or rel == ["main"]:
                path = ()
            elif rel[-1] == "mod":
                path = tuple(rel[:-1])
            else:
                path = tuple(rel)
            mods[path] = os.path.join(root, f)
    return mods


def strip(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def expand(prefix, body):
    """The paths of a use tree `prefix::{body}`."""
    out, depth, cur = [], 0, ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    paths = []
    for item in out:
        item = item.strip()
        if not item:
            continue
        m = re.match(r"^([\w:]*?)::\{(.*)\}$", item, re.S)
        if m:
            paths += expand(prefix + [p for p in m.group(1).split("::") if p], m.group(2))
        else:
            paths.append(prefix + [p for p in item.split(" as ")[0].strip().split("::") if p])
    return paths


def targets(text, here):
    """Module paths (possibly too long) named by the text of module `here`."""
    text = strip(text)
    found = []
    for m in re.finditer(r"\b(crate|super)::\{", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        base = [] if m.group(1) == "crate" else list(here[:-1])
        found += expand(base, text[m.end() : i - 1])
    for m in re.finditer(r"\b(crate|super)((?:::\w+)+)", text):
        base = [] if m.group(1) == "crate" else list(here[:-1])
        found.append(base + [p for p in m.group(2).split("::") if p])
    return found


def reexports(mods):
    """Names the crate root re-exports (`pub use module::{A, B}`) -> their module."""
    names = {}
    if () not in mods:
        return names
    with open(mods[()]) as f:
        text = strip(f.read())
    for m in re.finditer(r"pub use ((?:\w+::)*)\{?([^;]*?)\}?;", text):
        first = m.group(1).split("::")[0]
        if (first,) not in mods:
            continue
        for path in expand([p for p in m.group(1).split("::") if p], m.group(2)):
            names[path[-1]] = tuple(path[:-1])
    return names


def resolve(path, mods, names=None):
    """The longest module prefix of `path`, folded to its top-level file module; a name
    the crate root re-exports (`crate::Node`) counts as its module."""
    if names and len(path) >= 1 and path[0] in names:
        path = list(names[path[0]]) + list(path)
    for n in range(len(path), 0, -1):
        if tuple(path[:n]) in mods:
            return fold(tuple(path[:n]), mods)
    return None


def fold(mod, mods):
    # A child module that is only its parent's tests (foo/tests.rs) counts as the parent.
    if len(mod) > 1 and mod[-1] == "tests":
        return mod[:-1]
    return mod


def scc(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    src = args[0] if args else "node/src"
    mods = modules(src)
    names = reexports(mods)
    graph = {}
    for mod, file in mods.items():
        here = fold(mod, mods)
        graph.setdefault(here, set())
        with open(file) as f:
            text = f.read()
        for t in targets(text, mod):
            r = resolve(t, mods, names)
            if r is not None and r != here and r != ():
                graph[here].add(r)
    if () in graph:
        del graph[()]
    for v in graph:
        graph[v].discard(())
    name = lambda m: "::".join(m)
    comps = sorted(scc(graph), key=len, reverse=True)
    edges = sum(len(v) for v in graph.values())
    print(f"{len(graph)} modules, {edges} edges")
    for c in comps:
        if len(c) > 1:
            print(f"circle of {len(c)}: {' '.join(sorted(name(m) for m in c))}")
    print("sizes:", [len(c) for c in comps if len(c) > 1], "largest:", max(len(c) for c in comps))
    if "--edges" in sys.argv:
        for v in sorted(graph):
            print(f"{name(v)} -> {' '.join(sorted(name(w) for w in graph[v]))}")


if __name__ == "__main__":
    main()
