#!/usr/bin/env python3
"""The structure counts issue 44 (the third redesign) is judged by, from the source files.

Counts, for the workspace under crates/:
  * non-test source lines per crate (each file counted up to its first `#[cfg(test)]`; a file
    whose module is declared only under `#[cfg(test)]` is test code and not counted);
  * module cycles inside each crate: a module (one file) depends on another when it names it
    through `crate::`, `super::` or `self::` paths (in `use` lines and in code); cycles are the
    strongly connected components of that graph with more than one module;
  * arrows between crates (`linerate-*` dependencies in each Cargo.toml) and whether any cycle;
  * files whose non-test part holds an `AtomicBool`, `process::exit` outside `main.rs`,
    `sleep(` in crates/*/tests, non-test functions returning `Result<_, String>` (other than
    `parse_*`), and `unsafe` blocks per file.

A textual approximation (no macro expansion, no cfg evaluation), good enough to compare one
tree with another: run it on both.

Usage: tools/structure.py [ROOT] [--json]
"""

import json
import re
import sys
from pathlib import Path

args = [a for a in sys.argv[1:] if not a.startswith("--")]
ROOT = Path(args[0] if args else Path(__file__).resolve().parent.parent)
CRATES = ROOT / "crates"


def non_test(text: str) -> str:
    """The file up to its first `#[cfg(test)]` item, not counting a declaration of a test-only
    module in another file (`#[cfg(test)] mod pair;`), after which the file's own code goes on."""
    for m in re.finditer(r"#\[cfg\(test\)\]", text):
        if not re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*;", text[m.end():]):
            return text[: m.start()]
    return text


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(re.sub(r"//.*", "", line) for line in text.splitlines())


def module_path(src: Path, f: Path) -> tuple:
    rel = f.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def crate_modules(src: Path) -> dict:
    return {module_path(src, f): f for f in sorted(src.rglob("*.rs"))}


def test_only(mods: dict) -> set:
    """Modules declared only under `#[cfg(test)]` (`#[cfg(test)] mod flag_units;`): the whole file
    is test code, so none of it counts as non-test lines."""
    out = set()
    for m, f in mods.items():
        for d in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_]\w*)\s*;", f.read_text()):
            out.add(m + (d.group(1),))
    return out


PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP_RE = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\}\s*;", re.S)


def resolve(mods: dict, here: tuple, head: str, rest: list) -> tuple | None:
    """The longest known module a path names, from module `here`."""
    if head == "crate":
        base = ()
    else:
        # `self` is the module itself (in `foo/mod.rs` too: its path is `foo`); `super` its parent.
        base = here
        if head == "super":
            base = here[:-1]
        while rest and rest[0] == "super":
            base, rest = base[:-1], rest[1:]
    best = None
    cur = base
    for seg in rest:
        cur = cur + (seg,)
        if cur in mods:
            best = cur
        else:
            break
    return best


def deps_of(mods: dict, here: tuple, text: str) -> set:
    out = set()
    for m in USE_GROUP_RE.finditer(text):
        head, prefix, inner = m.group(1), m.group(2), m.group(3)
        pre = [s for s in prefix.split("::") if s]
        for item in re.split(r",", inner):
            item = item.strip().split(" as ")[0].strip()
            segs = [s for s in re.split(r"::", item) if s and s != "{" and re.match(r"^[A-Za-z_]\w*$", s)]
            t = resolve(mods, here, head, pre + segs)
            if t is not None:
                out.add(t)
    for m in PATH_RE.finditer(text):
        segs = [s for s in m.group(2).split("::") if s]
        t = resolve(mods, here, m.group(1), segs)
        if t is not None:
            out.add(t)
    # a parent module that declares children does not depend on them by that; a child naming
    # its ancestors' items (crate::x::Y where x is an ancestor) is an upward arrow, counted.
    out.discard(here)
    return out


def sccs(graph: dict) -> list:
    index, low, stack, on, res, n = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
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
            res.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            strong(v)
    return [c for c in res if len(c) > 1]


def main():
    report = {"crates": {}, "crate_arrows": [], "totals": {}}
    atomic_files, exits, string_results, unsafe_blocks = [], [], [], {}
    crate_names = {}
    for cdir in sorted(p for p in CRATES.iterdir() if (p / "Cargo.toml").exists()):
        toml = (cdir / "Cargo.toml").read_text()
        name = re.search(r'^name\s*=\s*"([^"]+)"', toml, re.M).group(1)
        crate_names[cdir.name] = name
        deps = sorted(set(re.findall(r"^(linerate-[a-z-]+)\s*[.=]", toml.split("[dev-dependencies]")[0], re.M)) - {name})
        for d in deps:
            report["crate_arrows"].append([name, d])
        src = cdir / "src"
        mods = crate_modules(src)
        lines = 0
        graph = {}
        tests_only = test_only(mods)
        for m, f in mods.items():
            if any(m[: len(t)] == t for t in tests_only):
                continue
            text = non_test(f.read_text())
            lines += len(text.splitlines())
            code = strip_comments(text)
            graph[m] = sorted(deps_of(mods, m, code))
            rel = str(f.relative_to(ROOT))
            if "AtomicBool" in code:
                atomic_files.append(rel)
            if "process::exit" in code and f.name != "main.rs":
                exits.append(rel)
            n_unsafe = len(re.findall(r"\bunsafe\s*\{", code))
            if n_unsafe:
                unsafe_blocks[rel] = n_unsafe
            for fm in re.finditer(r"\bfn\s+([A-Za-z_]\w*)[^;{]*?->\s*(Result<[^{;]*?,\s*String\s*>)", code, re.S):
                if not fm.group(1).startswith("parse"):
                    string_results.append(f"{rel}: {fm.group(1)}")
        cycles = [sorted("/".join(x) or "<root>" for x in c) for c in sccs(graph)]
        report["crates"][name] = {"non_test_lines": lines, "cycles": cycles}
    sleeps = 0
    for t in sorted(CRATES.glob("*/tests/**/*.rs")):
        sleeps += len(re.findall(r"\bsleep\(", strip_comments(t.read_text())))
    # crate cycles
    g = {}
    for a, b in report["crate_arrows"]:
        g.setdefault(a, []).append(b)
        g.setdefault(b, [])
    report["crate_cycles"] = [sorted(c) for c in sccs(g)]
    report["totals"] = {
        "atomicbool_files": atomic_files,
        "process_exit_outside_main": exits,
        "sleep_in_tests": sleeps,
        "result_string_fns": len(string_results),
        "result_string_list": string_results,
        "unsafe_blocks": sum(unsafe_blocks.values()),
        "unsafe_files": unsafe_blocks,
    }
    if "--json" in sys.argv:
        print(json.dumps(report, indent=1))
        return
    print("non-test lines (each file up to its first #[cfg(test)]), module cycles inside each crate:")
    for name, c in report["crates"].items():
        cyc = "; ".join(" <-> ".join(x) for x in c["cycles"]) or "none"
        print(f"  {name:18} {c['non_test_lines']:6}  cycles: {len(c['cycles'])} ({cyc})")
    print("arrows between crates:")
    for a, b in report["crate_arrows"]:
        print(f"  {a} -> {b}")
    print(f"  cycles between crates: {len(report['crate_cycles'])}")
    t = report["totals"]
    print(f"files with an AtomicBool (non-test): {len(t['atomicbool_files'])}: {', '.join(t['atomicbool_files'])}")
    print(f"process::exit outside main.rs: {len(t['process_exit_outside_main'])} {t['process_exit_outside_main']}")
    print(f"sleep( in crates/*/tests: {t['sleep_in_tests']}")
    print(f"non-test functions returning Result<_, String> (not parse*): {t['result_string_fns']}")
    print(f"unsafe blocks: {t['unsafe_blocks']} in {len(t['unsafe_files'])} files")


if __name__ == "__main__":
    main()
