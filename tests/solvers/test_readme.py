"""The README's first library example runs as written and converges, without a warning."""

import re
import warnings

import pytest

from tests.conftest import ROOT, shared_file


def first_python_block() -> str:
    text = (ROOT / "README.md").read_text()
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def test_the_first_example_converges(monkeypatch, capsys):
    monkeypatch.chdir(shared_file("a9a", "a9a.bz2").parent)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a ConvergenceWarning fails the example
        exec(compile(first_python_block(), "README.md", "exec"), {})
    score, status, gap, duality_gap, n_iter = capsys.readouterr().out.split()
    assert status == "converged" and float(gap) <= 1e-3 and float(duality_gap) < 1e-6
    assert float(score) == pytest.approx(0.849, abs=0.002) and int(n_iter) < 1000


def test_the_default_tol_stops_where_the_readme_says():
    # the service's job defaults are the estimator's: its a9a figures are LinearSVC()'s
    import solvers

    text = (ROOT / "README.md").read_text()  # a comment in a shell block, over two lines
    stated = re.search(r"a9a's default job stops after about (\d+) passes at gap[\s#]+([\d.]+)",
                       text)
    X, y = solvers.read_libsvm(shared_file("a9a", "a9a.bz2"))
    clf = solvers.LinearSVC(random_state=0).fit(X, y)
    assert clf.status_ == "converged" and clf.tol == 0.1
    assert clf.n_iter_ == pytest.approx(int(stated.group(1)), rel=0.1)
    assert clf.gap_ == pytest.approx(float(stated.group(2)), abs=0.002)
