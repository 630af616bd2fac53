"""The solvers package is a library of its own: it must never import the web or database stack."""

import ast
from pathlib import Path

FORBIDDEN = {
    "app",
    "fastapi",
    "starlette",
    "sqlalchemy",
    "pydantic",
    "pydantic_settings",
    "alembic",
}
SOLVERS = Path(__file__).resolve().parents[1] / "solvers"


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_solvers_never_import_the_service_stack():
    files = sorted(SOLVERS.rglob("*.py"))
    assert files, "no solver modules found"
    offenders = {str(p.relative_to(SOLVERS)): sorted(imported_roots(p) & FORBIDDEN) for p in files}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_scan_detects_a_forbidden_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from fastapi import FastAPI\n    import sqlalchemy.orm\n")
    assert imported_roots(bad) & FORBIDDEN == {"fastapi", "sqlalchemy"}


def test_benchmarks_never_import_the_tests():
    benchmarks = SOLVERS.parent / "benchmarks"
    offenders = [p.name for p in sorted(benchmarks.glob("*.py")) if "tests" in imported_roots(p)]
    assert offenders == []
