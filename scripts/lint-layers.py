#!/usr/bin/env python3
"""The project's own layering lint, run by `make test` (the lint suite).

Checks, from the source text alone (no build needed):
  - module (src/): `core/` names nothing outside itself, no `redis_module`
    and no `unsafe`; `api/` names only `core`; the glue never names the
    `edge`; `extern "C"` and raw Module API calls appear only in `edge/` and
    `api/`; no file outside `core/` is longer than 600 lines;
  - client (client/src/): nothing outside `cli/` names `cli`; the
    connections (`transport/`, `tls`) name none of the layers above them
    (`redlock/`, `hold/`, `guard`, `semaphore`); the quorum arithmetic and
    outcomes (`quorum`, `outcome`) name no connection; no file is longer
    than 700 lines;
  - both crates: the files import each other one way (no cycle);
  - bindings (python/src, node/src): they reach the client through its
    `hold` layer and its top-level names only, never its `transport` or
    `redlock` internals;
  - no tracked text file points outside the repository (`../shared`).

usage: scripts/lint-layers.py [--graph]   (--graph prints each crate's
folder-level import graph). Exit 1 with one line per finding.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODULE_MAX_LINES = 600
CLIENT_MAX_LINES = 700


def rust_files(src):
    """Module path (tuple of names) -> path relative to ROOT, for every .rs file under src."""
    found = {}
    for root, _dirs, files in os.walk(os.path.join(ROOT, src)):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            parts = os.path.relpath(path, os.path.join(ROOT, src))[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            found[tuple(parts)] = os.path.relpath(path, ROOT)
    return found


def blank(text, keep_strings):
    """The text with comments (and, unless keep_strings, the insides of
    string and char literals) blanked out, line breaks kept so that line
    numbers still match. A small scanner: a `//` inside a string or a quote
    inside a comment is not mistaken for the other."""
    out, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif (m := re.match(r'(?:b|c)?r(#*)"', text[i : i + 40])) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            closing = '"' + m.group(1)
            j = text.find(closing, i + m.end())
            j = n if j < 0 else j + len(closing)
            body = text[i:j]
            out.append(body if keep_strings else '""' + "\n" * body.count("\n"))
            i = j
        elif ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            body = text[i : j + 1]
            out.append(body if keep_strings else '""' + "\n" * body.count("\n"))
            i = j + 1
        elif ch == "'" and (m := re.match(r"'(?:\\.|\\u\{[0-9a-fA-F]+\}|[^'\\])'", text[i : i + 12])):
            out.append(m.group(0) if keep_strings else "' '")
            i += m.end()
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def without_comments(text):
    return blank(text, keep_strings=True)


def code_of(text):
    """The code alone, so that a path named in a doc comment or a message
    does not count as an import (`extern "C"` keeps its string: it is
    looked for in `without_comments`)."""
    return blank(text, keep_strings=False)


def named_paths(code):
    """Every `crate::`/`super::`/`self::` path a file names, `use` trees expanded."""
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        paths.extend(expand_tree(re.sub(r"\s+", "", m.group(1))))
    for m in re.finditer(r"\b(?:crate|super|self)(?:::[A-Za-z_]\w*)+", code):
        paths.append(m.group(0).split("::"))
    return paths


def expand_tree(tree):
    """`a::{b,c::{d,e}}` -> [[a,b],[a,c,d],[a,c,e]]; renames (`as x`) dropped."""
    tree = re.sub(r"as\w+(?=[,}]|$)", "", tree.replace(" as ", "as"))
    if "{" not in tree:
        return [tree.split("::")]
    open_at = tree.index("{")
    prefix = [p for p in tree[:open_at].split("::") if p]
    inner = tree[open_at + 1 : tree.rindex("}")]
    items, depth, current = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += (ch == "{") - (ch == "}")
        current += ch
    if current:
        items.append(current)
    out = []
    for item in items:
        for sub in expand_tree(item):
            out.append(prefix if sub == ["self"] else prefix + sub)
    return out


def target_of(path, here, modules):
    """The file (module path) that `path`, named in file `here`, points into."""
    head, rest = path[0], path[1:]
    if head == "crate":
        base = ()
    elif head in ("super", "self"):
        # `here` is the file's module; `super` of a mod.rs is its parent folder's module.
        base = here[:-1] if head == "super" else here
    else:
        return None
    while rest and rest[0] == "super":
        base, rest = base[:-1], rest[1:]
    full = base + tuple(rest)
    for n in range(len(full), 0, -1):
        if full[:n] in modules:
            return full[:n]
    return None


def import_graph(src):
    modules = rust_files(src)
    edges, codes = {}, {}
    for mod, rel in modules.items():
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            text = f.read()
        code = code_of(text)
        codes[mod] = (text, code)
        edges[mod] = set()
        for path in named_paths(code):
            target = target_of(path, mod, modules)
            if target is not None and target != mod and not (len(target) < len(mod) and mod[: len(target)] == target):
                edges[mod].add(target)
    return modules, edges, codes


def cycles(edges):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
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

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def name(mod):
    return "::".join(mod) or "crate"


def check_crate(src, label, rules, max_lines, exempt_from_length, problems, show_graph):
    modules, edges, codes = import_graph(src)
    for component in cycles(edges):
        problems.append(f"{label}: files import each other in a cycle: {', '.join(modules[m] for m in component)}")
    for mod, targets in sorted(edges.items()):
        for target in sorted(targets):
            for rule in rules:
                why = rule(mod, target)
                if why:
                    problems.append(f"{modules[mod]}: names {name(target)}: {why}")
    for mod, rel in sorted(modules.items()):
        text, _code = codes[mod]
        lines = text.count("\n")
        if lines > max_lines and not (mod and mod[0] in exempt_from_length):
            problems.append(f"{rel}: {lines} lines, more than {max_lines}: split it by job")
    if show_graph:
        folders = {}
        for mod, targets in edges.items():
            for target in targets:
                if mod[:1] != target[:1]:
                    folders.setdefault(name(mod[:1]), set()).add(name(target[:1]))
        print(f"{label}:")
        for folder in sorted(folders):
            print(f"  {folder} -> {', '.join(sorted(folders[folder]))}")
    return modules, codes


def module_rules(mod, target):
    top, target_top = mod[:1], target[:1]
    if top == ("core",) and target_top != ("core",):
        return "core/ knows nothing outside itself"
    if top == ("api",) and target_top not in (("core",), ("api",)):
        return "api/ is the boundary below the glue; it names only core"
    if target_top == ("edge",) and top not in (("edge",), ()):
        return "the glue never names the edge: Redis calls into the edge, the edge calls the glue"
    return None


CLIENT_BELOW_ALGORITHM = {("transport",), ("tls",)}
CLIENT_ALGORITHM = {("redlock",), ("hold",), ("guard",), ("semaphore",)}


def client_rules(mod, target):
    top, target_top = mod[:1], target[:1]
    if target_top == ("cli",) and top not in (("cli",), (), ("main",)):
        return "only the CLI names the CLI"
    if top in CLIENT_BELOW_ALGORITHM and target_top in CLIENT_ALGORITHM:
        return "the connections sit below the quorum algorithm and the holds"
    if top in (("quorum",), ("outcome",)) and target_top in CLIENT_BELOW_ALGORITHM | CLIENT_ALGORITHM:
        return "the quorum's arithmetic and outcomes are data, free of connections"
    return None


def module_text_checks(modules, codes, problems):
    for mod, rel in sorted(modules.items()):
        text, code = codes[mod]
        top = mod[:1]
        at_edge = top in (("edge",), ("api",))
        if top == ("core",):
            if re.search(r"\bredis_module\b", code):
                problems.append(f"{rel}: core/ names redis_module")
            if re.search(r"\bunsafe\b", code):
                problems.append(f"{rel}: core/ has unsafe code")
        if not at_edge:
            bare = without_comments(text)
            for m in re.finditer(r'extern\s+"C"', bare):
                line = bare[: m.start()].count("\n") + 1
                problems.append(f"{rel}:{line}: extern \"C\" outside src/edge and src/api")
            for m in re.finditer(r"\bRedisModule_\w+", code):
                line = code[: m.start()].count("\n") + 1
                problems.append(f"{rel}:{line}: {m.group(0)} outside src/edge and src/api: call it through api")
    core_root = modules.get(("core",))
    if core_root and "#![forbid(unsafe_code)]" not in codes[("core",)][0]:
        problems.append(f"{core_root}: core/ must say #![forbid(unsafe_code)]")


def binding_checks(problems):
    for folder in ("python/src", "node/src"):
        for _mod, rel in sorted(rust_files(folder).items()):
            with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
                code = code_of(f.read())
            for m in re.finditer(r"\bredlock::(transport|redlock|outcome|quorum|guard|semaphore)\b", code):
                line = code[: m.start()].count("\n") + 1
                problems.append(
                    f"{rel}:{line}: a binding names redlock::{m.group(1)}; it reaches the client through redlock::hold and the crate's top-level names"
                )


def outside_pointers(problems):
    listed = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True, check=False)
    if listed.returncode != 0:
        problems.append("git ls-files failed: run from a clone")
        return
    me = os.path.relpath(os.path.abspath(__file__), ROOT)
    for rel in listed.stdout.decode().split("\0"):
        if not rel or rel == me:
            continue
        path = os.path.join(ROOT, rel)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        for m in re.finditer(r"\.\./shared\b", text):
            line = text[: m.start()].count("\n") + 1
            problems.append(f"{rel}:{line}: points outside the repository (../shared)")


def main():
    show_graph = "--graph" in sys.argv[1:]
    problems = []
    modules, codes = check_crate("src", "module", [module_rules], MODULE_MAX_LINES, {"core"}, problems, show_graph)
    module_text_checks(modules, codes, problems)
    check_crate("client/src", "client", [client_rules], CLIENT_MAX_LINES, set(), problems, show_graph)
    binding_checks(problems)
    outside_pointers(problems)
    for p in problems:
        print(f"layers: {p}")
    if problems:
        print(f"layers: {len(problems)} finding(s)")
        return 1
    print("layers: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
