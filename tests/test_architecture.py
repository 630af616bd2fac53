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


# --- a job's status has one owner ----------------------------------------------------------------

APP = Path(__file__).resolve().parents[1] / "app"
LIFECYCLE = APP / "jobs" / "lifecycle.py"


def _chain_updates_job(node: ast.AST) -> bool:
    """True when an expression chain such as `update(Job).where(...).values(...)` starts at
    `update(Job)`."""
    while isinstance(node, ast.Call | ast.Attribute):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "update":
                return any(isinstance(a, ast.Name) and a.id == "Job" for a in node.args)
            node = func
        else:
            node = node.value
    return False


def job_status_writes(path: Path) -> list[int]:
    """Lines of `path` that write a job's status outside the lifecycle module's own function."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call):
            keywords = {k.arg for k in node.keywords}
            func = node.func
            if "status" in keywords and isinstance(func, ast.Attribute) and func.attr == "values":
                if _chain_updates_job(func.value):
                    lines.append(node.lineno)
            if "status" in keywords and isinstance(func, ast.Name) and func.id == "Job":
                lines.append(node.lineno)
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for leaf in ast.walk(target):
                if (
                    isinstance(leaf, ast.Attribute)
                    and leaf.attr == "status"
                    and isinstance(leaf.value, ast.Name)
                    and "job" in leaf.value.id.lower()
                ):
                    lines.append(node.lineno)
    return lines


def test_only_the_lifecycle_module_writes_a_job_status():
    offenders = {
        str(p.relative_to(APP)): job_status_writes(p)
        for p in sorted(APP.rglob("*.py"))
        if p != LIFECYCLE
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    assert job_status_writes(LIFECYCLE)  # the scan sees the one place that does


def test_scan_detects_a_status_write(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f(session, job):\n"
        "    job.status = 'failed'\n"
        "    session.execute(update(Job).where(Job.id == 1).values(status='queued'))\n"
        "    session.add(Job(id='j', status='running'))\n"
        "    session.execute(update(Model).values(status='converged'))\n"
    )
    assert job_status_writes(bad) == [2, 3, 4]
