"""The public API is unchanged by the move into family subpackages: every name imports from
`solvers`, the first names of the structural solvers stay with their signatures, and `ls solvers`
shows the families."""

import inspect

import solvers
from tests.conftest import ROOT

# (name, parameters) as they were before the subpackages
SIGNATURES = {
    "fit_structural": "X margins groups C tol max_iter nonneg w0 reg_scale random_state callback "
    "warm_start time_limit pairwise shrinking",
    "fit_structural_stream": "source chunk_rows cache_size passes n_features zero_based C tol "
    "max_iter nonneg w0 reg_scale random_state callback time_limit warm_start",
    "read_libsvm": "source n_features zero_based dtype query_id",
}


def test_every_public_name_imports():
    for name in solvers.__all__:
        assert getattr(solvers, name) is not None, name
    assert set(dir(solvers)) >= set(solvers.__all__)


def test_the_first_names_keep_their_signatures():
    assert solvers.fit_structural is solvers.solve_structural
    assert solvers.fit_structural_stream is solvers.solve_structural_stream
    for name, params in SIGNATURES.items():
        assert list(inspect.signature(getattr(solvers, name)).parameters) == params.split(), name


def test_the_layout_shows_the_families():
    folders = {p.name for p in (ROOT / "solvers").iterdir() if p.is_dir() and p.name[0] != "_"}
    assert {"io", "binary", "multiclass", "regression", "structural", "estimators"} <= folders
    top = {p.name for p in (ROOT / "solvers").glob("*.py")}
    assert top == {"__init__.py"}, top


def test_regression_does_not_import_the_structural_family():
    text = (ROOT / "solvers" / "regression" / "svr.py").read_text()
    assert "structural" not in text.split('"""', 2)[2]
