"""The longest functions and those with the most parameters in ``src/hyde_tutor`` outside ``cli/``.

    python scripts/function_sizes.py [SRC_DIR] [--top N]

Lines are a function's source lines, decorators and docstring included; parameters count every argument
(``self``/``cls`` left out, ``*args``/``**kwargs`` counted). Used for issue 21's before/after figures.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def functions(src: Path) -> list[tuple[int, int, str]]:
    """(lines, parameters, ``module:qualname``) of every function outside ``cli/``."""
    found: list[tuple[int, int, str]] = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        if rel.parts[0] == "cli":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        _walk(tree, str(rel), "", found)
    return found


def _walk(node: ast.AST, module: str, prefix: str, found: list[tuple[int, int, str]]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            _walk(child, module, f"{prefix}{child.name}.", found)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = child.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
            count = len([p for p in params if p.arg not in ("self", "cls")]) + bool(a.vararg) + bool(a.kwarg)
            start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
            found.append((child.end_lineno - start + 1, count, f"{module}:{prefix}{child.name}"))
            _walk(child, module, f"{prefix}{child.name}.", found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", nargs="?", default="src/hyde_tutor", type=Path)
    parser.add_argument("--top", type=int, default=3)
    args = parser.parse_args()
    found = functions(args.src)
    print("longest:")
    for lines, params, name in sorted(found, key=lambda f: (-f[0], f[2]))[: args.top]:
        print(f"  {lines:4d} lines  {params:2d} params  {name}")
    print("most parameters:")
    for lines, params, name in sorted(found, key=lambda f: (-f[1], f[2]))[: args.top]:
        print(f"  {params:4d} params  {lines:3d} lines  {name}")


if __name__ == "__main__":
    main()
