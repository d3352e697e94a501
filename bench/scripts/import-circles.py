#!/usr/bin/env python3
"""Find import circles between the files of each crate in the workspace.

A circle is a set of module files that name each other's items (through `use`
or an inline `crate::`/`super::`/`self::` path), so that none of them can be
read, moved or tested without the others. Two kinds of edge are ignored
because they are not dependencies in that sense:

* a parent module re-exporting a child's names (`pub use child::X`), the way a
  `mod.rs` presents its children, and
* a test module (`tests.rs`, `tests/`, an inline `mod tests`) using what it
  tests.

Usage: bench/scripts/import-circles.py [crate-or-app-dir ...]   (paths printed relative to
the current directory; with no argument, every crate and app of this repository)
Exits 1 and lists every circle (strongly connected set of files) if any.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TOKEN = re.compile(
    r"""
    (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<string>b?r\#*".*?"\#*|b?"(?:\\.|[^"\\])*"|b?'(?:\\.|[^'\\])')
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<sep>::)
  | (?P<punct>[{}();,*#\[\]!])
  | (?P<other>\S)
    """,
    re.S | re.X,
)


def tokens(text):
    out = []
    for m in TOKEN.finditer(text):
        kind = m.lastgroup
        if kind in ("comment", "string"):
            continue
        out.append(m.group(kind))
    return out


def module_files(src):
    """Map module path tuples to files for one crate's src/ directory."""
    mods = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, src)[:-3].split(os.sep)
            if rel in (["lib"], ["main"]):
                path = ()
            elif rel[-1] == "mod":
                path = tuple(rel[:-1])
            elif rel[0] == "bin":
                continue
            else:
                path = tuple(rel)
            mods.setdefault(path, full)
    return mods


def is_test_module(path):
    return any(p == "tests" or p.endswith("_tests") for p in path)


def resolve(mods, path):
    """Longest prefix of `path` that is a module file."""
    for n in range(len(path), -1, -1):
        if tuple(path[:n]) in mods:
            return tuple(path[:n])
    return ()


def expand_use(toks, i):
    """Expand the use tree starting at toks[i]; returns (paths, end index)."""
    paths = []

    def tree(i, prefix):
        cur = list(prefix)
        alias = None
        while i < len(toks):
            t = toks[i]
            if t == "{":
                i += 1
                while toks[i] != "}":
                    i = tree(i, cur)
                    if toks[i] == ",":
                        i += 1
                return i + 1
            if t in (",", "}", ";"):
                paths.append((cur, alias))
                return i
            if t == "as":
                alias = toks[i + 1] if i + 1 < len(toks) else None
                i += 2
                continue
            if t == "::":
                i += 1
                continue
            cur.append(t)
            i += 1
        return i

    i = tree(i, [])
    return paths, i


def edges_of(mods, modpath, text, externs):
    """Module paths that the file of `modpath` names, as (target, via_pub_use, from);
    adds to `externs` the names it gives other crates' items."""
    toks = tokens(text)
    out = []
    # Stack of inline modules: (name, brace depth at which it closes).
    inline = []
    depth = 0
    i = 0

    def absolute(segs, here):
        if not segs:
            return None
        head = segs[0]
        if head == "crate":
            return list(segs[1:])
        base = list(here)
        j = 0
        if head in ("self", "super"):
            while j < len(segs) and segs[j] in ("self", "super"):
                if segs[j] == "super":
                    if not base:
                        return None
                    base.pop()
                j += 1
            return base + list(segs[j:])
        # A relative path in a `use` names a child module of the current one.
        if tuple(base + [head]) in mods:
            return base + list(segs)
        return None

    while i < len(toks):
        t = toks[i]
        here = list(modpath) + [m for m, _ in inline]
        if t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
            while inline and inline[-1][1] > depth:
                inline.pop()
        elif t == "mod" and i + 2 < len(toks) and toks[i + 2] == "{":
            inline.append((toks[i + 1], depth + 1))
            depth += 1
            i += 3
            continue
        elif t == "use":
            pub = i > 0 and (toks[i - 1] == "pub" or toks[i - 1] == ")")
            paths, i = expand_use(toks, i + 1)
            for segs, alias in paths:
                target = absolute(segs, here)
                if target is not None:
                    out.append((tuple(target), pub, tuple(here)))
                elif segs and not inline:
                    # Another crate's item (or the crate itself) under a local name.
                    externs.add(alias or segs[-1])
            continue
        elif (
            t in ("crate", "super", "self")
            and i + 1 < len(toks)
            and toks[i + 1] == "::"
            and (i == 0 or toks[i - 1] != "$")
        ):
            # (`$crate::` in a macro names the caller's dependency, not this file's.)
            segs = [t]
            j = i + 1
            while j + 1 < len(toks) and toks[j] == "::" and re.match(r"[A-Za-z_]", toks[j + 1]):
                segs.append(toks[j + 1])
                j += 2
            target = absolute(segs, here)
            if target is not None:
                out.append((tuple(target), False, tuple(here)))
            i = j
            continue
        i += 1
    return out


def crate_graph(src):
    mods = module_files(src)
    graph = {m: set() for m in mods}
    edges = {}
    # Names a module re-exports (`pub use a::b::Name`): Name -> full path, so
    # that `use super::Name` leads to the file that defines Name.
    reexports = {m: {} for m in mods}
    externs = {m: set() for m in mods}
    for modpath, f in mods.items():
        with open(f, encoding="utf-8") as fh:
            edges[modpath] = edges_of(mods, modpath, fh.read(), externs[modpath])
        for target, pub, here in edges[modpath]:
            if pub and here == modpath and target:
                reexports[modpath][target[-1]] = target

    def through_reexports(target):
        for _ in range(8):
            mod = resolve(mods, target)
            rest = target[len(mod):]
            if not rest or rest[0] not in reexports[mod]:
                return mod
            nxt = reexports[mod][rest[0]] + rest[1:]
            if nxt == target:
                return mod
            target = nxt
        return resolve(mods, target)

    names = {}
    for modpath in mods:
        if is_test_module(modpath):
            continue
        for target, pub, here in edges[modpath]:
            if is_test_module(here):
                continue
            owner = resolve(mods, target)
            if len(target) > len(owner) and target[len(owner)] in externs[owner]:
                continue  # another crate's item re-exported there
            dst = owner if pub else through_reexports(target)
            if dst == modpath or is_test_module(dst):
                continue
            # A parent presenting a descendant's names is not a dependency.
            if pub and dst[: len(modpath)] == modpath:
                continue
            graph[modpath].add(dst)
            names.setdefault((modpath, dst), set()).add("::".join(target) or "crate")
    return mods, graph, names


def circles(graph):
    """Tarjan's strongly connected components with more than one member."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
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
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    dirs = sys.argv[1:]
    if not dirs:
        dirs = []
        for top in ("crates", "apps"):
            for name in sorted(os.listdir(os.path.join(ROOT, top))):
                dirs.append(os.path.join(ROOT, top, name))
        dirs.append(os.path.join(ROOT, "bench"))
        dirs.append(os.path.join(ROOT, "bench", "net"))
        dirs.append(os.path.join(ROOT, "tests", "guests"))
    found = 0
    for d in dirs:
        src = os.path.join(d, "src")
        if not os.path.isdir(src):
            continue
        mods, graph, names = crate_graph(src)
        for comp in circles(graph):
            found += 1
            files = [os.path.relpath(mods[m]) for m in comp]
            print("circle: " + " <-> ".join(files))
            for a in comp:
                for b in comp:
                    if b in graph[a]:
                        used = ", ".join(sorted(names[(a, b)]))
                        print(f"    {os.path.relpath(mods[a])} uses {os.path.relpath(mods[b])}: {used}")
    if found:
        print(f"{found} import circle(s)")
        return 1
    print("no import circles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
