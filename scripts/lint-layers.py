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
  - both crates: the files import each other one way (no cycle), and so
    do the top-level modules, each a folder or a file under the source
    folder and one layer (no loop between them); a path is followed
    however it is spelled: `crate::`, `self::`, `super::`, through a child
    module (`mod line; use line::by_name;`), in a grouped `use a::{b,
    c::d}`, and from the client's binary into its library (`redlock::`);
  - bindings (python/src, node/src): they reach the client through its
    `hold` layer and its top-level names only, never its `transport` or
    `redlock` internals;
  - no tracked text file points outside the repository (`../shared`).

usage: scripts/lint-layers.py [--graph]   (--graph prints each crate's
folder-level import graph). Exit 1 with one line per finding.
       scripts/lint-layers.py --self-test   (the cycle and loop detection
run on small trees laid out in a temporary folder, each with a known
cycle, loop or none; exit 1 if it finds other ones).
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


class RustFile:
    """One .rs file of a crate: its path (relative to the crate's source
    folder), the crate root that declares it (`lib.rs` or `main.rs`; a
    binary and its library share the folder) and its module path there."""

    def __init__(self, rel, root, path, text):
        self.rel, self.root, self.path, self.text = rel, root, path, text
        self.code = code_of(text)
        # `mod x;`: a child module in a file of its own
        self.children = set(re.findall(r"\bmod\s+(?:r#)?(\w+)\s*;", self.code))
        # `mod tests { ... }`: (start, end, name), for what `self`/`super` mean inside
        self.inline = []
        for m in re.finditer(r"\bmod\s+(\w+)\s*\{", self.code):
            depth, j = 0, m.end() - 1
            while j < len(self.code):
                depth += (self.code[j] == "{") - (self.code[j] == "}")
                if depth == 0:
                    break
                j += 1
            self.inline.append((m.start(), j, m.group(1)))

    def scope_at(self, at):
        """The module path at offset `at` of the code: inside `mod tests { }`, that module."""
        return self.path + tuple(name for start, end, name in self.inline if start <= at < end)


def crate_files(src):
    """rel -> RustFile for every .rs file under src (an absolute folder).
    Each crate root (lib.rs, main.rs) declares its modules (`mod x;`),
    each of those its own, and so on: a file belongs to the crate whose
    root reaches it. A file no root reaches is placed by its path in the
    library's crate."""
    texts = {}
    for folder, _dirs, names in os.walk(src):
        for fname in names:
            if fname.endswith(".rs"):
                path = os.path.join(folder, fname)
                with open(path, encoding="utf-8") as f:
                    texts[os.path.relpath(path, src)] = f.read()
    roots = [r for r in ("lib.rs", "main.rs") if r in texts]
    files = {}
    for root in roots:
        todo = [(root, ())]
        while todo:
            rel, path = todo.pop()
            if rel in files:
                continue
            files[rel] = RustFile(rel, root, path, texts[rel])
            stem, fname = os.path.split(rel)
            folder = stem if fname in ("lib.rs", "main.rs", "mod.rs") else rel[:-3]
            for child in sorted(files[rel].children):
                for candidate in (os.path.join(folder, child + ".rs"), os.path.join(folder, child, "mod.rs")):
                    if candidate in texts:
                        todo.append((candidate, path + (child,)))
                        break
    for rel, text in sorted(texts.items()):
        if rel not in files:
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            files[rel] = RustFile(rel, roots[0] if roots else rel, tuple(parts), text)
    return files


def named_paths(f, library):
    """(offset, path) for every path file `f` names that may lead to another
    file: `use` trees expanded (`use a::{b, c::d}`), inline
    `crate::`/`super::`/`self::` paths, inline paths through a child
    module the file declares (`line::by_name(..)` beside `mod line;`) and,
    in a binary, paths into its library (`library::...`)."""
    code, paths = f.code, []
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        for path in expand_tree(m.group(1)):
            if path and path[0]:
                paths.append((m.start(), path))
    heads = {"crate", "super", "self"} | f.children
    if library and f.root != "lib.rs":
        heads.add(library)
    # the `use` trees are done: blank them, so that `use crate::{line::x}` is not read as `line::x`
    rest = re.sub(r"\buse\s+[^;]+;", lambda m: " " * len(m.group(0)), code)
    pattern = r"(?<![\w:])(?:" + "|".join(sorted(heads)) + r")(?:::[A-Za-z_]\w*)+"
    for m in re.finditer(pattern, rest):
        paths.append((m.start(), m.group(0).split("::")))
    return paths


def expand_tree(tree):
    """`a::{b,c::{d,e}}` -> [[a,b],[a,c,d],[a,c,e]]; renames (`as x`) dropped."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+(?:r#)?\w+", "", tree))
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


def target_of(f, at, path, index, library):
    """The file (rel) that `path`, named at offset `at` of file `f`, points
    into: the longest module prefix of the path that is a file. `index`
    maps (crate root, module path) to a file. None for other crates."""
    head, rest = path[0], tuple(path[1:])
    root, scope = f.root, f.scope_at(at)
    if head == "crate":
        base = ()
    elif head == "super":
        base = scope[:-1]
    elif head == "self":
        base = scope
    elif head in f.children:
        base, rest = f.path, (head,) + rest
    elif library and head == library and f.root != "lib.rs":
        root, base = "lib.rs", ()
    else:
        return None
    while rest and rest[0] == "super":
        base, rest = base[:-1], rest[1:]
    full = base + tuple(p for p in rest if p not in ("self", "*"))
    for n in range(len(full), -1, -1):
        if (root, full[:n]) in index:
            return index[(root, full[:n])]
    return None


def below(files, upper, lower):
    """Whether file `lower`'s module lies inside file `upper`'s (its child, or a child's child...)."""
    a, b = files[upper], files[lower]
    return a.root == b.root and len(b.path) > len(a.path) and b.path[: len(a.path)] == a.path


def import_graph(src, library=None):
    """The files of src (absolute) and rel -> set of rels each names."""
    files = crate_files(src)
    index = {(f.root, f.path): rel for rel, f in files.items()}
    edges = {}
    for rel, f in files.items():
        edges[rel] = set()
        for at, path in named_paths(f, library):
            target = target_of(f, at, path, index, library)
            if target is not None and target != rel:
                edges[rel].add(target)
    return files, edges


def unit_of(f):
    """A file's top-level module (a folder or a file directly under the
    source folder), None for a crate root."""
    return (f.root, f.path[0]) if f.path else None


def layering(src, library=None):
    """(files, edges, file cycles, loops between top-level modules) of the
    crate(s) in src (absolute). A cycle is a list of rels; a loop is
    (sorted top-level module names, a few of the imports that tie them).

    Two files of one folder name each other as a matter of course: a
    parent its children (`mod line; use line::by_name;`), the children the
    items of their parent (`use super::*`). So files are looked at twice:
    without the parents' uses of their children, and without the
    children's uses of their parents; a cycle in either is one of imports
    that cross. Top-level modules (each a folder, one layer) must import
    one way whatever their files do."""
    files, edges = import_graph(src, library)
    without_down = {r: {t for t in ts if not below(files, r, t)} for r, ts in edges.items()}
    without_up = {r: {t for t in ts if not below(files, t, r)} for r, ts in edges.items()}
    found = []
    for component in cycles(without_down) + cycles(without_up):
        if component not in found:
            found.append(component)
    units = {}
    for rel, targets in edges.items():
        here = unit_of(files[rel])
        if here is None:
            continue
        units.setdefault(here, set())
        for target in targets:
            there = unit_of(files[target])
            if there is not None and there != here:
                units[here].add(there)
                units.setdefault(there, set())
    loops = []
    for component in cycles(units):
        ties = sorted(
            f"{rel} -> {target}"
            for rel, targets in edges.items()
            for target in targets
            if unit_of(files[rel]) in component and unit_of(files[target]) in component and unit_of(files[rel]) != unit_of(files[target])
        )
        loops.append((sorted(name for _root, name in component), ties))
    return files, edges, found, loops


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


def check_crate(src, label, library, rules, max_lines, exempt_from_length, problems, show_graph):
    files, edges, file_cycles, loops = layering(os.path.join(ROOT, src), library)
    where = lambda rel: os.path.join(src, rel)
    for component in file_cycles:
        problems.append(f"{label}: files import each other in a cycle: {', '.join(where(r) for r in component)}")
    for names, ties in loops:
        problems.append(f"{label}: top-level modules import each other in a loop: {', '.join(names)} ({'; '.join(ties[:6])})")
    for rel, targets in sorted(edges.items()):
        for target in sorted(targets):
            for rule in rules:
                why = rule(files[rel].path, files[target].path)
                if why:
                    problems.append(f"{where(rel)}: names {name(files[target].path)}: {why}")
    for rel, f in sorted(files.items()):
        lines = f.text.count("\n")
        if lines > max_lines and not (f.path and f.path[0] in exempt_from_length):
            problems.append(f"{where(rel)}: {lines} lines, more than {max_lines}: split it by job")
    if show_graph:
        folders = {}
        for rel, targets in edges.items():
            for target in targets:
                here, there = unit_of(files[rel]), unit_of(files[target])
                if here != there and here is not None and there is not None:
                    folders.setdefault(here[1], set()).add(there[1])
        print(f"{label}:")
        for folder in sorted(folders):
            print(f"  {folder} -> {', '.join(sorted(folders[folder]))}")
    return files


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


def module_text_checks(src, files, problems):
    for _rel, f in sorted(files.items()):
        rel, text, code = os.path.join(src, f.rel), f.text, f.code
        top = f.path[:1]
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
    for f in files.values():
        if f.path == ("core",) and "#![forbid(unsafe_code)]" not in f.text:
            problems.append(f"{os.path.join(src, f.rel)}: core/ must say #![forbid(unsafe_code)]")


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


# Trees the self-test lays out (rel path -> text), and what `layering`
# must find in each: the cycle detection is a check that can fail.
FIXTURES = {
    # guard -> redlock -> (its child line) -> semaphore -> guard: the loop
    # issue 57 found, through `use line::by_name;` beside `mod line;`.
    "loop through a child module": (
        {
            "lib.rs": "pub mod guard;\npub mod redlock;\npub mod semaphore;\n",
            "guard.rs": "use crate::redlock::Lock;\npub struct Guard(Lock);\n",
            "redlock/mod.rs": "mod line;\nuse line::by_name;\npub struct Lock;\n",
            "redlock/line.rs": "use super::*;\nuse crate::semaphore::{permit_set, MAX};\npub fn by_name() {}\n",
            "semaphore.rs": "use crate::guard::Guard;\npub fn permit_set() {}\npub const MAX: u32 = 1;\n",
        },
        [["guard.rs", "redlock/line.rs", "redlock/mod.rs", "semaphore.rs"]],
        [["guard", "redlock", "semaphore"]],
    ),
    # The same inside one folder (so no loop between top-level modules):
    # wait/mod.rs -> its child wait/line.rs -> round.rs -> wait/mod.rs,
    # the last two inline paths (`self::`, `super::`) and a grouped use.
    "cycle inside a folder, through a child": (
        {
            "lib.rs": "mod redlock;\n",
            "redlock/mod.rs": "mod round;\nmod wait;\npub struct Lock;\n",
            "redlock/wait/mod.rs": "mod line;\npub struct Waiter;\npub fn wait() { line::by_name() }\n",
            "redlock/wait/line.rs": "pub fn by_name() { super::super::round::once() }\n",
            "redlock/round.rs": "use crate::redlock::{self, wait::{Waiter as W}};\npub fn once() {}\n",
        },
        [["redlock/round.rs", "redlock/wait/line.rs", "redlock/wait/mod.rs"]],
        [],
    ),
    # Folders that import each other through files that do not: only the
    # top-level graph sees it.
    "loop between folders": (
        {
            "lib.rs": "mod a;\nmod b;\n",
            "a/mod.rs": "mod x;\nmod y;\n",
            "a/x.rs": "pub(crate) use crate::b::B;\n",
            "a/y.rs": "pub struct Y;\n",
            "b.rs": "pub struct B(crate::a::y::Y);\n",
        },
        [],
        [["a", "b"]],
    ),
    # One way: children use their parent, the parent its children, a test
    # module its file, and a binary its library; paths in comments and
    # strings are not imports.
    "clean": (
        {
            "lib.rs": "pub mod aliases;\npub mod guard;\npub mod redlock;\npub mod semaphore;\npub use redlock::Lock;\n",
            "main.rs": "mod cli;\nfn main() { cli::run() }\n",
            "cli/mod.rs": "use redlock::guard::Guard;\npub fn run() { crate::cli::output() }\npub fn output() {}\n",
            "aliases.rs": "pub struct Alias;\n",
            "guard.rs": "use crate::redlock::Lock;\nuse crate::aliases;\n// crate::semaphore::permit_set\npub struct Guard(Lock);\n",
            "redlock/mod.rs": "mod line;\nmod permits;\nuse line::by_name;\npub struct Lock;\n",
            "redlock/line.rs": "use super::*;\nuse super::permits::permit_set;\n"
            "const WHY: &str = \"crate::semaphore::x\";\npub fn by_name() {}\n"
            "#[cfg(test)]\nmod tests {\n    use super::*;\n    use super::super::Lock;\n}\n",
            "redlock/permits.rs": "pub fn permit_set() {}\n",
            "semaphore.rs": "use crate::guard::Guard;\nuse crate::redlock::{Lock as Held};\n",
        },
        [],
        [],
    ),
}

# Who names whom in the "clean" tree, every way a path is spelled resolved.
CLEAN_EDGES = {
    "lib.rs": {"redlock/mod.rs"},
    "main.rs": {"cli/mod.rs"},
    "cli/mod.rs": {"guard.rs"},
    "aliases.rs": set(),
    "guard.rs": {"redlock/mod.rs", "aliases.rs"},
    "redlock/mod.rs": {"redlock/line.rs"},
    "redlock/line.rs": {"redlock/mod.rs", "redlock/permits.rs"},
    "redlock/permits.rs": set(),
    "semaphore.rs": {"guard.rs", "redlock/mod.rs"},
}


def self_test():
    """Lays out each fixture in a temporary folder; 1 if `layering` finds
    other cycles or loops than the fixture has."""
    import tempfile

    failures = []
    for title, (tree, want_cycles, want_loops) in FIXTURES.items():
        with tempfile.TemporaryDirectory() as src:
            for rel, text in tree.items():
                os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
                with open(os.path.join(src, rel), "w", encoding="utf-8") as f:
                    f.write(text)
            _files, edges, got_cycles, loops = layering(src, "redlock")
        got_loops = [names for names, _ties in loops]
        if sorted(got_cycles) != sorted(want_cycles):
            failures.append(f"{title}: file cycles {got_cycles}, not {want_cycles}")
        if sorted(got_loops) != sorted(want_loops):
            failures.append(f"{title}: loops {got_loops}, not {want_loops}")
        if title == "clean" and edges != CLEAN_EDGES:
            failures.append(f"{title}: imports {edges}, not {CLEAN_EDGES}")
    for failure in failures:
        print(f"layers self-test: {failure}")
    print(f"layers self-test: {len(FIXTURES) - len({f.split(':')[0] for f in failures})} passed, {len({f.split(':')[0] for f in failures})} failed")
    return 1 if failures else 0


def main():
    if "--self-test" in sys.argv[1:]:
        return self_test()
    show_graph = "--graph" in sys.argv[1:]
    problems = []
    files = check_crate("src", "module", None, [module_rules], MODULE_MAX_LINES, {"core"}, problems, show_graph)
    module_text_checks("src", files, problems)
    check_crate("client/src", "client", "redlock", [client_rules], CLIENT_MAX_LINES, set(), problems, show_graph)
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
