"""The house rule on size: no function in a product package (dinfer_*) is longer than
MAX_LINES, counted from its `def` to its last line (docstring and comments included).
A long function is split along its seams, never exempted here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 60


def long_functions(root: Path) -> list[str]:
    """'path:line name (N lines)' for every function over MAX_LINES under root's dinfer_*
    packages, methods and nested functions included."""
    found = []
    for path in sorted(root.glob("dinfer_*/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_LINES:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} "
                                 f"({length} lines)")
    return found


def test_no_product_function_is_over_the_limit():
    assert long_functions(ROOT) == []


def test_the_scan_finds_a_long_method_in_a_subpackage(tmp_path):
    module = tmp_path / "dinfer_x" / "sub" / "m.py"
    module.parent.mkdir(parents=True)
    body = "".join(f"        x{i} = {i}\n" for i in range(MAX_LINES - 1))
    module.write_text(f"class A:\n    def short(self):\n        pass\n\n"
                      f"    async def long(self):\n{body}")
    assert long_functions(tmp_path) == []
    module.write_text(module.read_text() + "        x = 0\n")
    assert long_functions(tmp_path) == ["dinfer_x/sub/m.py:5 long (61 lines)"]
