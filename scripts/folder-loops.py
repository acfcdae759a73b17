#!/usr/bin/env python3
"""Lists import circles between the files of one folder of src/ (run from the project root).

In each folder, every `.rs` file and every subfolder is one node (a subfolder stands for all the
files under it; `mod.rs` is the folder's face and no node). A file depends on a sibling when it
names it: `super::x`, `crate::a::b::x`, `self::x`, in paths and in `use` trees, or a name that the
folder's `mod.rs` re-exports from `x` (`pub use x::Name`). Test code (`#[cfg(test)]` items,
`tests.rs`, `tests/` folders) is ignored, as are comments and literals. A glob import of the
crate's own modules outside test code counts as a failure too: its edges cannot be read. Exit 1
when some folder has a circle; each is printed with the files that make its edges."""
import os, re, sys

SRC = "src"
CFG_TEST = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")
INNER_CFG_TEST = re.compile(r"#\s*!\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")


def scrub(t):
    """Blanks comments and the contents of string and char literals."""
    out, i, n = [], 0, len(t)
    while i < n:
        if t.startswith("//", i):
            j = t.find("\n", i)
            i = n if j < 0 else j
            continue
        if t.startswith("/*", i):
            depth = 0
            while i < n:
                if t.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif t.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                    if depth == 0:
                        break
                else:
                    i += 1
            out.append(" ")
            continue
        m = re.compile(r'(?<![\w])[bc]?r(#*)"').match(t, i)
        if m and (i == 0 or not (t[i - 1].isalnum() or t[i - 1] == "_")):
            close = '"' + m.group(1)
            j = t.find(close, m.end())
            i = n if j < 0 else j + len(close)
            out.append('""')
            continue
        c = t[i]
        if c == '"':
            j = i + 1
            while j < n and t[j] != '"':
                j += 2 if t[j] == "\\" else 1
            i = j + 1
            out.append('""')
            continue
        if c == "'":
            m = re.compile(r"'(?:\\u\{[0-9a-fA-F]{1,6}\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'\n])'").match(t, i)
            if m:
                i = m.end()
                out.append("' '")
                continue
        out.append(c)
        i += 1
    return "".join(out)


def matching(t, i, o, c):
    """Index just past the bracket closing the one at t[i]."""
    depth = 0
    for j in range(i, len(t)):
        if t[j] == o:
            depth += 1
        elif t[j] == c:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(t)


def strip_tests(t):
    """The text without `#[cfg(test)]` items (up to their `;` or closing brace)."""
    out, pos = [], 0
    for m in CFG_TEST.finditer(t):
        if m.start() < pos:
            continue
        i, depth = m.end(), 0
        while i < len(t):
            c = t[i]
            if c == "[" and t[i - 1] == "#":
                i = matching(t, i, "[", "]")
                continue
            if c in "([":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif depth <= 0 and c == ";":
                i += 1
                break
            elif depth <= 0 and c == "{":
                i = matching(t, i, "{", "}")
                break
            elif depth <= 0 and c == "}":
                break
            i += 1
        out.append(t[pos:m.start()])
        pos = i
    out.append(t[pos:])
    return "".join(out)


def use_paths(tree, prefix=""):
    """Expands a `use` tree (`a::{b, c::{d}}`) into its paths."""
    tree = tree.strip()
    brace = tree.find("{")
    if brace < 0:
        return [prefix + tree.split(" as ")[0].strip()]
    head = prefix + tree[:brace]
    body = tree[brace + 1:matching(tree, brace, "{", "}") - 1]
    parts, depth, cur = [], 0, ""
    for c in body:
        depth += c == "{"
        depth -= c == "}"
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    return [p for part in parts if part.strip() for p in use_paths(part, head)]


def module_of(path):
    """The module path of a file: src/server/models/bert.rs -> [server, models, bert]."""
    parts = os.path.relpath(path, SRC)[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def resolve(path, here):
    """An absolute module path for a `crate::`/`super::`/`self::` path, else None."""
    segs = [s for s in re.split(r"\s*::\s*", path) if s]
    if not segs or segs[0] not in ("crate", "super", "self"):
        return None
    at = [] if segs[0] == "crate" else list(here)
    if segs[0] == "self":
        segs = segs[1:]
    elif segs[0] == "crate":
        segs = segs[1:]
    while segs and segs[0] == "super":
        at, segs = at[:-1], segs[1:]
    return at + [s for s in segs if re.fullmatch(r"\w+", s)]


files = {}
for d, dirs, fs in os.walk(SRC):
    if os.path.basename(d) == "tests":
        dirs[:] = []
        continue
    for f in fs:
        if f.endswith(".rs") and f != "tests.rs":
            p = os.path.join(d, f)
            raw = scrub(open(p, encoding="utf-8", errors="replace").read())
            if not INNER_CFG_TEST.search(raw):
                files[p] = strip_tests(raw)

# children of each folder, and the names each folder's face re-exports from a child
children, reexports = {}, {}
for p in files:
    m = module_of(p)
    for k in range(len(m)):
        children.setdefault(tuple(m[:k]), set()).add(m[k])
for p, t in files.items():
    if os.path.basename(p) in ("mod.rs", "lib.rs"):
        folder = tuple(module_of(p))
        for u in re.finditer(r"\bpub(?:\s*\([^)]*\))?\s+use\s+([^;]+);", t):
            for path in use_paths(u.group(1)):
                segs = [s for s in re.split(r"\s*::\s*", path) if s]
                if segs and segs[0] == "self":
                    segs = segs[1:]
                if len(segs) >= 2 and segs[0] in children.get(folder, ()):
                    reexports.setdefault(folder, {})[segs[-1]] = segs[0]

edges, why = {}, {}
for p, t in files.items():
    here = module_of(p)
    paths = []
    for u in re.finditer(r"\buse\s+([^;]+);", t):
        paths += use_paths(u.group(1))
    paths += re.findall(r"\b(?:crate|super|self)(?:\s*::\s*\w+)+", t)
    is_face = os.path.basename(p) in ("mod.rs", "lib.rs")
    for path in paths:
        target = resolve(path, here)
        if target is None:
            continue
        for k in range(len(here) - (1 if is_face else 0)):
            folder = tuple(here[:k])
            if tuple(target[:k]) != folder or len(target) <= k:
                continue
            name = target[k]
            if name not in children.get(folder, ()):
                name = reexports.get(folder, {}).get(name)
            if name and name != here[k]:
                edges.setdefault(folder, {}).setdefault(here[k], set()).add(name)
                why.setdefault((folder, here[k], name), set()).add(p)


def circles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


sys.setrecursionlimit(10000)
bad = 0
for folder in sorted(edges):
    for comp in circles(edges[folder]):
        bad += 1
        where = "src/" + "/".join(folder) if folder else "src"
        print(f"circle in {where}: {' <-> '.join(comp)}")
        for a in comp:
            for b in sorted(edges[folder][a] & set(comp)):
                print(f"  {a} -> {b}: {', '.join(sorted(why[(folder, a, b)]))}")
# A file's glob of the crate's own modules (`use super::*`) would hide the siblings it names
# (an inline module's `use super::*` names its own file, so only a file's top level counts).
for p, t in sorted(files.items()):
    for m in re.finditer(r"(?m)^use\s+(?:crate|super|self)\b[\w\s:]*::\s*\*", t):
        bad += 1
        print(f"glob import in {p}: `{m.group(0)}` hides which files it uses; name them")
print(f"folders: {len(children)}; circles between files of one folder: {bad}")
sys.exit(1 if bad else 0)
