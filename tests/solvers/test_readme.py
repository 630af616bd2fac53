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
