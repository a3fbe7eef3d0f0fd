#!/usr/bin/env python3
"""Parse-check PowerShell scripts for Windows PowerShell 5.1, where no PowerShell can be installed (Debian, PyPI and
npm ship none that runs here; PSScriptAnalyzer needs one): the tree-sitter PowerShell grammar
(tree-sitter-powershell, .ci/requirements.txt).

  ps-lint.py FILE...

Fails on a syntax error (an ERROR or MISSING node, with its line and column) and on what only PowerShell 7 parses:
the pipeline chain operators `&&` / `||` (the grammar already rejects `??`, `?.` and the ternary `? :`, as 5.1 does).
One gap of the grammar: a comma list of unquoted words as a command argument (`Select-Object Name, Id`) does not parse
here though PowerShell takes it; quote them (`Select-Object 'Name', 'Id'`).
"""
import sys

import tree_sitter
import tree_sitter_powershell

PS7_ONLY = {"pipeline_chain_tail": "the pipeline chain operators && and || (PowerShell 7 only)"}


def problems(source):
    parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_powershell.language()))
    tree = parser.parse(source)
    found = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        row, col = node.start_point
        where = f"{row + 1}:{col + 1}"
        if node.is_error:
            found.append(f"{where}: syntax error near {node.text.decode(errors='replace')[:40]!r}")
            continue
        if node.is_missing:
            found.append(f"{where}: missing {node.type!r}")
        if node.type in PS7_ONLY:
            found.append(f"{where}: {PS7_ONLY[node.type]}")
        stack.extend(reversed(node.children))
    return found


def main(paths):
    if not paths:
        sys.exit(__doc__)
    bad = 0
    for path in paths:
        with open(path, "rb") as f:
            found = problems(f.read())
        for p in found:
            print(f"{path}:{p}", file=sys.stderr)
        bad += bool(found)
        if not found:
            print(f"{path}: parses (Windows PowerShell 5.1 syntax)")
    if bad:
        sys.exit(f"ps-lint.py: {bad} of {len(paths)} script(s) do not parse")


if __name__ == "__main__":
    main(sys.argv[1:])
