#!/usr/bin/python3
"""Checks the walls the code keeps: no import circles among the files of any crate, no
non-test function over 100 lines outside the decoding tables listed below, and the engine's
`Array` a facade (at most 60 inherent methods; outside its own module, nothing reaches its
fields), and at least 25 assertions per 100 functions in the crates that hold state (engine,
rt, server). Prints the longest functions either way, and every crate's assertion rate.

A file's module imports another when it names it by path (`crate::a::b`, `super::x`,
`use crate::{a, b}`, a child named from its parent as `child::`); a circle is a set of
modules that reach each other that way. Method calls on a type defined elsewhere do not
count: `impl Array` blocks in child modules are how a type's methods are split by topic.

Usage: scripts/walls.py [--top N]
"""
import argparse
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
WALLED = sorted(
    os.path.join("crates", c, "src")
    for c in os.listdir(os.path.join(ROOT, "crates"))
    if os.path.isdir(os.path.join(ROOT, "crates", c, "src"))
)
MAX_LINES = 100
# Pure decoding tables: one `match` over opcodes or keys, each arm a line or two.
TABLES = {
    ("crates/scsi/src/decode.rs", "parse"),
    ("crates/iscsi/src/pdu.rs", "parse"),
    ("crates/iscsi/src/params.rs", "answer"),
}


def non_test(text):
    """The file's text before its test module."""
    m = re.search(r"^#\[cfg\(test\)\]", text, re.M)
    return text[: m.start()] if m else text


def module_of(src, path):
    parts = os.path.relpath(path, src)[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def expand_braces(text):
    """`p::{a, b::c}` -> `p::a p::b::c`, innermost first."""
    pat = re.compile(r"\b((?:crate|super|self)(?:::\w+)*)::\{([^{}]*)\}")
    while True:
        new = pat.sub(
            lambda m: " ".join(
                m.group(1) + "::" + x.strip().split(" as ")[0]
                for x in m.group(2).split(",")
                if x.strip() and x.strip() != "self"
            ),
            text,
        )
        if new == text:
            return text
        text = new


def edges(src):
    files = {}
    for dp, _, fns in os.walk(src):
        for f in fns:
            if f.endswith(".rs"):
                p = os.path.join(dp, f)
                files[module_of(src, p)] = p
    out = {m: set() for m in files}
    for m, p in files.items():
        text = expand_braces(non_test(open(p).read()))
        for ref in re.findall(r"\b((?:crate|super|self)(?:::\w+)+)", text):
            segs = ref.split("::")
            if segs[0] == "crate":
                path = tuple(segs[1:])
            else:
                base = list(m)
                if segs[0] == "self":
                    segs = segs[1:]
                while segs and segs[0] == "super":
                    base = base[:-1]
                    segs = segs[1:]
                path = tuple(base) + tuple(segs)
            for n in range(len(path), 0, -1):
                if path[:n] in files:
                    if path[:n] != m:
                        out[m].add(path[:n])
                    break
        for c in files:
            if len(c) == len(m) + 1 and c[: len(m)] == m:
                if re.search(r"(?<![:\w])" + re.escape(c[-1]) + r"::", text):
                    out[m].add(c)
    return out


def circles(graph):
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

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
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def strip(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    i = line.find("//")
    return line[:i] if i >= 0 else line


def functions():
    """(lines, file, line, name) of every non-test function of every crate."""
    out = []
    for dp, _, fns in os.walk(os.path.join(ROOT, "crates")):
        rel = os.path.relpath(dp, ROOT)
        if "/src" not in "/" + rel + "/" or "/tests" in rel:
            continue
        for f in fns:
            if not f.endswith(".rs"):
                continue
            p = os.path.join(dp, f)
            lines = non_test(open(p).read()).split("\n")
            for i, l in enumerate(lines):
                m = re.match(r"\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)", l)
                if not m:
                    continue
                depth, started = 0, False
                for j in range(i, len(lines)):
                    s = strip(lines[j])
                    if not started and ";" in s and "{" not in s:
                        break
                    depth += s.count("{") - s.count("}")
                    started = started or "{" in s
                    if started and depth == 0:
                        out.append((j - i + 1, os.path.relpath(p, ROOT), i + 1, m.group(6)))
                        break
    return sorted(out, reverse=True)


def assertions():
    """{crate: (non-test functions, assertions in them)}: `assert!`, `assert_eq!`,
    `assert_ne!` and their `debug_` forms outside test modules."""
    out = {}
    for c in sorted(os.listdir(os.path.join(ROOT, "crates"))):
        src = os.path.join(ROOT, "crates", c, "src")
        fns = asserts = 0
        for dp, _, names in os.walk(src):
            for f in names:
                if f.endswith(".rs"):
                    text = non_test(open(os.path.join(dp, f)).read())
                    fns += len(re.findall(FN, text, re.M))
                    asserts += len(re.findall(r"\b(?:debug_)?assert(?:_eq|_ne)?!", text))
        out[c] = (fns, asserts)
    return out


# Where state lives, invariants are asserted: the crates that own the engine's, the
# runtime's and the daemon's state keep at least this many assertions per 100 functions.
MIN_ASSERTIONS = {"engine": 25, "rt": 25, "server": 25}

ARRAY = os.path.join("crates", "engine", "src", "array")
MAX_ARRAY_METHODS = 60


def blocks(text, head):
    """The bodies of the blocks that start with `head` (a regex) at a line's start."""
    for m in re.finditer(head, text, re.M):
        i = j = m.end()
        depth = 1
        while depth and j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        yield text[i:j]


def array_walls():
    """The engine's `Array`: its inherent methods (how many), and the places outside its own
    module (array/mod.rs) that reach one of its fields instead of a method or a part's own
    methods: `self.field` in an `impl Array` block, `array.field` in a function given it."""
    mod = non_test(open(os.path.join(ROOT, ARRAY, "mod.rs")).read())
    body = next(blocks(mod, r"^pub struct Array \{"))
    fields = re.findall(r"^    (\w+):", body, re.M)
    reach = re.compile(r"\b(?:self|array)\.(" + "|".join(fields) + r")\b(?!\s*\()")
    methods, reached = 0, []
    for dp, _, names in os.walk(os.path.join(ROOT, ARRAY)):
        for f in sorted(names):
            path = os.path.join(dp, f)
            if not f.endswith(".rs"):
                continue
            text = non_test(open(path).read())
            impls = list(blocks(text, r"^impl Array \{"))
            methods += sum(len(re.findall(FN, b, re.M)) for b in impls)
            if os.path.relpath(path, ROOT) == os.path.join(ARRAY, "mod.rs"):
                continue
            for b in impls:
                reached += [(os.path.relpath(path, ROOT), m.group(0)) for m in reach.finditer(b)]
            for m in re.finditer(r"\barray\.(" + "|".join(fields) + r")\b(?!\s*\()", text):
                reached.append((os.path.relpath(path, ROOT), m.group(0)))
    return methods, reached


FN = r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+\w+"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    bad = False
    for src in WALLED:
        for c in circles(edges(os.path.join(ROOT, src))):
            print(f"import circle in {src}: " + " <-> ".join("::".join(x) or "(root)" for x in c))
            bad = True
    fns = functions()
    for n, path, line, name in fns:
        if n > MAX_LINES and (path, name) not in TABLES:
            print(f"{path}:{line}: {name} is {n} lines (at most {MAX_LINES} outside decoding tables)")
            bad = True
    print(f"longest functions:")
    for n, path, line, name in fns[: args.top]:
        table = " (decoding table)" if (path, name) in TABLES else ""
        print(f"  {n:4} {path}:{line} {name}{table}")
    methods, reached = array_walls()
    print(f"Array: {methods} inherent methods (at most {MAX_ARRAY_METHODS})")
    if methods > MAX_ARRAY_METHODS:
        bad = True
    for path, what in reached:
        print(f"{path}: `{what}` reaches a field of Array outside its own module")
        bad = True
    print("assertions per 100 functions (outside tests):")
    for c, (fns, asserts) in assertions().items():
        rate = 100 * asserts / max(fns, 1)
        floor = MIN_ASSERTIONS.get(c)
        low = floor is not None and rate < floor
        note = f"  below {floor}: assert the invariants of the state you add" if low else ""
        print(f"  {c:8} {rate:5.1f}  ({asserts} in {fns} functions){note}")
        bad = bad or low
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
