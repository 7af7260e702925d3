#!/usr/bin/env python3
"""Checks README.md and the book in docs/ (every docs/*.md), and the links
of python/README.md and examples/, without building anything.

- every relative link (`[text](target)`, `![alt](target)`, `[ref]: target`)
  points to a file or directory that exists;
- every `#anchor` (in the same file or in another Markdown file) is the
  anchor of a heading there, by GitHub's rules: the heading's text
  (inline code, emphasis and link markup removed) lowercased, punctuation
  other than `-` and `_` dropped, spaces turned into `-`, and `-1`, `-2`
  ... added to repeated headings; an explicit `<a id="...">` counts too;
- docs/SUMMARY.md lists at least six chapters, each an existing file;
- README.md has at most 250 lines;
- README.md and every chapter in docs/ (SUMMARY.md aside) is included by
  client/src/doctests.rs, so that their Rust examples are compiled as the
  client crate's doc tests;
- the Node options' defaults docs/node.md states are the Rust client's
  (`Settings::default()` in client/src/settings.rs), and so is its
  `lockDelay` figure (the safe default's rule, which node/index.d.ts
  states too; node/test/units.test.mjs checks the figure against a real
  election's); each code of its table of argument errors is one the
  package throws (node/lib, node/src), and its test is
  node/test/units.test.mjs.

Links to http(s) and mailto addresses are not followed, and links inside
fenced code blocks and inline code are not links. Prints one line per
check and `docs: N passed, M failed` last; exits 1 if any check failed.
"""

import glob
import os
import re
import subprocess
import sys
from urllib.parse import unquote

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_MAX_LINES = 250
SUMMARY_MIN_CHAPTERS = 6

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REF_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
HTML_ID = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.I)


def prose_lines(text):
    """The file's lines with fenced code blocks blanked (line numbers kept)."""
    out = []
    fence = None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            out.append("")
        elif fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip()[len(m.group(1)):].strip():
                fence = None
            out.append("")
        else:
            out.append(line)
    return out


def without_inline_code(text):
    """Inline code spans replaced by `code` of no markup, so a bracket or a
    parenthesis inside them cannot make or break a link."""
    return re.sub(r"(`+)(?:(?!\1).)+?\1", lambda m: "x" * len(m.group(0)), text, flags=re.S)


def anchor(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)                 # inline code
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)       # links, images
    text = re.sub(r"<[^>]+>", "", text)                          # HTML tags
    text = re.sub(r"(\*\*|__|\*|_)(\S(?:.*?\S)?)\1", r"\2", text)  # emphasis
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


_anchors = {}


def anchors_of(path):
    """Every anchor a Markdown file offers (cached)."""
    if path not in _anchors:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        found = set()
        seen = {}
        for line in prose_lines(text):
            m = HEADING.match(line)
            if m:
                a = anchor(m.group(2))
                n = seen.get(a, 0)
                seen[a] = n + 1
                found.add(a if n == 0 else f"{a}-{n}")
            found.update(HTML_ID.findall(line))
        _anchors[path] = found
    return _anchors[path]


def links_of(text):
    """(line number, target) of every link outside code."""
    prose = without_inline_code("\n".join(prose_lines(text)))
    found = []
    for m in INLINE_LINK.finditer(prose):
        found.append((prose.count("\n", 0, m.start()) + 1, m.group(2)))
    for m in REF_DEFINITION.finditer(prose):
        found.append((prose.count("\n", 0, m.start()) + 1, m.group(1)))
    return found


def check_links(path):
    """Problems with the links of one file, as messages."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    problems = []
    for line, target in links_of(text):
        if re.match(r"^(https?|mailto|ftp):", target, re.I):
            continue
        if not target:
            problems.append(f"line {line}: empty link target")
            continue
        file_part, _, fragment = target.partition("#")
        file_part = unquote(file_part)
        dest = path if not file_part else os.path.normpath(os.path.join(os.path.dirname(path), file_part))
        if not os.path.exists(dest):
            problems.append(f"line {line}: {target}: {os.path.relpath(dest, ROOT)} does not exist")
            continue
        if fragment:
            if not dest.endswith(".md") or os.path.isdir(dest):
                problems.append(f"line {line}: {target}: an anchor into a file that is not Markdown")
            elif unquote(fragment) not in anchors_of(dest):
                problems.append(f"line {line}: {target}: no heading with anchor #{fragment} in {os.path.relpath(dest, ROOT)}")
    return problems


def check_summary(path):
    """Problems with docs/SUMMARY.md as a table of contents."""
    if not os.path.isfile(path):
        return ["docs/SUMMARY.md does not exist"]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    problems = []
    chapters = [t for _, t in links_of(text) if not re.match(r"^[a-z]+:", t, re.I)]
    if len(chapters) < SUMMARY_MIN_CHAPTERS:
        problems.append(f"lists {len(chapters)} chapters, fewer than {SUMMARY_MIN_CHAPTERS}")
    for target in chapters:
        dest = os.path.join(os.path.dirname(path), unquote(target.partition("#")[0]))
        if not os.path.isfile(dest) or not dest.endswith(".md"):
            problems.append(f"chapter {target}: no such Markdown file")
    return problems


def check_readme_lists_the_book(readme, summary):
    """The chapters of docs/SUMMARY.md that README.md's documentation
    list does not link to (a reader of the README would never find them)."""
    try:
        with open(readme, encoding="utf-8") as f:
            linked = {os.path.normpath(unquote(t.partition("#")[0])) for _, t in links_of(f.read())}
        with open(summary, encoding="utf-8") as f:
            chapters = [t.partition("#")[0] for _, t in links_of(f.read()) if not re.match(r"^[a-z]+:", t, re.I)]
    except OSError as e:
        return [f"{e.filename}: {e.strerror}"]
    return [f"docs/{c} is a chapter of docs/SUMMARY.md that README.md does not link to"
            for c in chapters if os.path.normpath(os.path.join("docs", unquote(c))) not in linked]


def check_doctests(files):
    """Which of README.md and the chapters client/src/doctests.rs leaves out."""
    path = os.path.join(ROOT, "client", "src", "doctests.rs")
    try:
        with open(path, encoding="utf-8") as f:
            included = set(re.findall(r'"\.\./\.\./([^"]+\.md)"', f.read()))
    except OSError as e:
        return [f"client/src/doctests.rs: {e.strerror}"]
    return [f"{name} is not included (its Rust examples would not be compiled)"
            for name in (os.path.relpath(f, ROOT) for f in files)
            if name != os.path.join("docs", "SUMMARY.md") and name not in included]


def rust_defaults():
    """`Settings::default()` and `SESSION_MARGIN` of client/src/settings.rs:
    times in ms, the rest as numbers."""
    with open(os.path.join(ROOT, "client", "src", "settings.rs"), encoding="utf-8") as f:
        text = f.read()
    body = text[text.index("impl Default for Settings"):]
    ms = lambda field: int(re.search(rf"{field}: Duration::from_millis\((\d+)\)", body).group(1))
    lo, hi = (int(n) for n in re.search(r"retry_delay: \(Duration::from_millis\((\d+)\), Duration::from_millis\((\d+)\)\)", body).groups())
    return {
        "request_timeout": ms("request_timeout"),
        "connect_timeout": ms("connect_timeout"),
        "retry_count": int(re.search(r"retry_count: (\d+)", body).group(1)),
        "retry_delay": (lo, hi),
        "drift_factor": float(re.search(r"drift_factor: ([\d.]+)", body).group(1)),
        "extend_fraction": eval(re.search(r"extend_fraction: ([\d. /]+),", body).group(1)),
        "session_margin": int(re.search(r"SESSION_MARGIN: Duration = Duration::from_millis\((\d+)\)", text).group(1)),
    }


def check_node_defaults():
    """The defaults docs/node.md states that are not the Rust client's."""
    try:
        d = rust_defaults()
        with open(os.path.join(ROOT, "docs", "node.md"), encoding="utf-8") as f:
            docs = " ".join(f.read().split())
        with open(os.path.join(ROOT, "node", "index.d.ts"), encoding="utf-8") as f:
            dts = " ".join(f.read().split())
    except (OSError, AttributeError, ValueError) as e:
        return [f"reading the defaults: {e}"]
    problems = []
    lo, hi = d["retry_delay"]
    for option, value in [("requestTimeout", d["request_timeout"]), ("connectTimeout", d["connect_timeout"]),
                          ("retryCount", d["retry_count"]), ("retryDelay", (lo + hi) // 2), ("retryJitter", (hi - lo) // 2),
                          ("driftFactor", d["drift_factor"])]:
        m = re.search(rf"`{option}` ([\d.]+)", docs)
        if not m or float(m.group(1)) != value:
            problems.append(f"docs/node.md: `{option}` {m.group(1) if m else '(not stated)'}, the Rust default is {value}")
    # The safe lock-delay (Settings::lock_delay_for) of a 30 s ttl.
    ttl = 30_000
    delay = round(min(ttl, ttl * d["extend_fraction"] + d["request_timeout"] + ttl * d["drift_factor"] + 2 + 2 * d["session_margin"]))
    m = re.search(r"\(([\d,]+) ms for a 30 s ttl with the default options\)", docs)
    if not m:
        problems.append("docs/node.md states no lockDelay default for a 30 s ttl ('(N ms for a 30 s ttl with the default options)')")
    elif int(m.group(1).replace(",", "")) != delay:
        problems.append(f"docs/node.md: the lockDelay default of a 30 s ttl is {delay} ms by the Rust defaults, not {m.group(1)}")
    rule = f"plus {2 * d['session_margin']} ms"
    for name, text in [("docs/node.md", docs), ("node/index.d.ts", dts)]:
        if "extension interval" not in text or rule not in text:
            problems.append(f"{name}: the lockDelay default's rule (the extension interval ... {rule}) is not stated")
    return problems


def check_node_error_codes():
    """Rows of docs/node.md's error tables whose code the package never
    sets, and argument-error codes the package sets that no row gives."""
    try:
        with open(os.path.join(ROOT, "docs", "node.md"), encoding="utf-8") as f:
            rows = re.findall(r"^\| `(\w+)`[^|]*\| `(ERR_[A-Z_]+)` \|", f.read(), re.M)
        sources = ""
        for path in glob.glob(os.path.join(ROOT, "node", "lib", "*.js")) + glob.glob(os.path.join(ROOT, "node", "src", "*.rs")):
            with open(path, encoding="utf-8") as f:
                sources += f.read()
    except OSError as e:
        return [f"{e.filename}: {e.strerror}"]
    documented = {code for _, code in rows}
    problems = [f"docs/node.md: {code} ({cls}) is a code the package never sets"
                for cls, code in rows if code.startswith("ERR_") and not code.startswith("ERR_REDLOCK") and f"'{code}'" not in sources and f'"{code}"' not in sources]
    thrown = set(re.findall(r"['\"](ERR_(?:INVALID_ARG|OUT_OF)_[A-Z_]+)['\"]", sources))
    problems += [f"the package throws {code}, which docs/node.md's table does not give" for code in sorted(thrown - documented)]
    return problems


def check_named_things_exist(files):
    """Each test, INFO field or other code name the docs cite (a
    `snake_case` name of three or more underscores, in backticks) is in
    the tracked sources: a figure whose test was renamed or dropped, or a
    field that is gone, is drift."""
    try:
        tracked = subprocess.run(["git", "ls-files", "*.rs", "*.py", "*.mjs", "*.js", "*.sh", "*.ts"],
                                 cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
        sources = ""
        for rel in tracked:
            with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
                sources += f.read()
    except (OSError, subprocess.CalledProcessError) as e:
        return [f"reading the sources: {e}"]
    problems = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for name in sorted(set(re.findall(r"`([a-z][a-z0-9]*(?:_[a-z0-9]+){3,})`", text))):
            if not re.search(rf"\b{name}\b", sources):
                problems.append(f"{os.path.relpath(path, ROOT)}: `{name}` is named nowhere in the sources")
    return problems


def main():
    results = []  # (name, [problems])
    files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    # The other Markdown readers land on, linking into the book.
    files += [os.path.join(ROOT, "python", "README.md")] + sorted(
        f for f in glob.glob(os.path.join(ROOT, "examples", "**", "*.md"), recursive=True) if "node_modules" not in f
    )
    for path in files:
        results.append((f"links of {os.path.relpath(path, ROOT)}", check_links(path)))
    with open(files[0], encoding="utf-8") as f:
        count = len(f.read().splitlines())
    results.append((f"README.md length ({count} lines, at most {README_MAX_LINES})",
                    [] if count <= README_MAX_LINES else [f"{count - README_MAX_LINES} lines too many"]))
    summary = os.path.join(ROOT, "docs", "SUMMARY.md")
    results.append(("docs/SUMMARY.md chapters", check_summary(summary)))
    results.append(("README.md links to every chapter of docs/SUMMARY.md", check_readme_lists_the_book(files[0], summary)))
    book = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    results.append(("README.md and the book are doc tests (client/src/doctests.rs)", check_doctests(book)))
    results.append(("every test and field the docs name is in the sources", check_named_things_exist(book)))
    results.append(("docs/node.md states the Rust client's defaults and lockDelay rule", check_node_defaults()))
    results.append(("docs/node.md gives each code of the package's argument errors", check_node_error_codes()))

    passed = failed = 0
    for name, problems in results:
        if problems:
            failed += 1
            print(f"docs: FAILED {name}")
            for p in problems:
                print(f"  {p}")
        else:
            passed += 1
            print(f"docs: ok     {name}")
    print(f"docs: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
