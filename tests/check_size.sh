#!/usr/bin/env bash
# tests/check_size.sh - functions stay short enough to read: none in
# src/train/ over 80 lines, none elsewhere in src/ or tools/ over 150. A
# function's length is its body's lines, from the line of its opening brace
# to the line of its closing brace. Every .c and .h file is read with its
# comments, string and character literals and preprocessor lines blanked
# (newlines kept), so braces inside them do not count; a brace at file level
# opens a function when the text before it ends with a parameter list
# (`name(...)`), not an initializer or a struct/enum/union.
# Prints one FAIL line per long function (lines, file:line, name, limit),
# "N passed, M failed" (one per function) and exits non-zero on any failure.
# Usage: tests/check_size.sh [repository root]
set -u
cd "${1:-$(dirname "$0")/..}" || exit 2

python3 - <<'PY'
import os, re, sys

LIMITS = [("src/train/", 80), ("src/", 150), ("tools/", 150)]  # the first prefix that matches


def blank(src):
    """Comments, string/char literals and preprocessor lines as spaces, newlines kept."""
    out, i, n = [], 0, len(src)
    line_start = True
    while i < n:
        c = src[i]
        if line_start and c in " \t":
            out.append(c); i += 1; continue
        if line_start and c == "#":  # a directive, with its continuation lines
            while i < n and src[i] != "\n":
                if src[i] == "\\" and i + 1 < n and src[i + 1] == "\n":
                    out.append(" \n"); i += 2; continue
                if src.startswith("/*", i):  # a comment inside a directive may span lines
                    j = src.find("*/", i + 2); j = n if j < 0 else j + 2
                    out.append(re.sub(r"[^\n]", " ", src[i:j])); i = j; continue
                out.append(" "); i += 1
            continue
        line_start = False
        if src.startswith("/*", i):
            j = src.find("*/", i + 2); j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j])); i = j; continue
        if src.startswith("//", i):
            j = src.find("\n", i); j = n if j < 0 else j
            out.append(" " * (j - i)); i = j; continue
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", src[i + 1:j - 1]) + c); i = j; continue
        if c == "\n":
            line_start = True
        out.append(c); i += 1
    return "".join(out)


def functions(path):
    text = blank(open(path, encoding="utf-8", errors="replace").read())
    depth, line, head, found = 0, 1, [], []
    start = None
    for c in text:
        if c == "\n":
            line += 1
        if depth == 0:
            if c == "{":
                before = "".join(head).rstrip()
                name = None
                if before.endswith(")") and not re.match(r"\s*(typedef\b|struct\b|enum\b|union\b)", before):
                    k, level = len(before) - 1, 0
                    while k >= 0:  # the '(' that opens the last parameter list
                        level += {")": 1, "(": -1}.get(before[k], 0)
                        if level == 0:
                            break
                        k -= 1
                    m = re.search(r"(\w+)\s*$", before[:max(k, 0)])
                    rest = before[:max(k, 0)].split()  # else CT_FN(name), (name), (*name(void))
                    name = m.group(1) if m else (rest[-1] if rest else None)
                start = (line, name)
                head = []
                depth = 1
            elif c in ";}":
                head = []
            else:
                head.append(c)
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                if start[1]:
                    found.append((line - start[0] + 1, start[0], start[1]))
                head = []
    return found


npass = nfail = 0
for top in ("src", "tools"):
    for root, dirs, files in os.walk(top):
        dirs.sort()
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(root, f)
            limit = next(l for p, l in LIMITS if path.startswith(p))
            for length, at, name in functions(path):
                if length > limit:
                    print("  FAIL %4d lines %s:%d %s (at most %d in %s)" % (
                        length, path, at, name, limit, "src/train/" if limit == 80 else "src/ and tools/"))
                    nfail += 1
                else:
                    npass += 1
print("tests/check_size.sh: %d passed, %d failed" % (npass, nfail))
sys.exit(1 if nfail else 0)
PY
