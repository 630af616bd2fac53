"""BENCHMARKS.md is generated from benchmarks/results/ (one source of truth), every fragment names
the command behind its figures, and RELIABILITY.md does not repeat benchmark figures."""

import re

from benchmarks import report
from tests.conftest import ROOT


def test_benchmarks_md_is_generated_from_the_results():
    assert (ROOT / "BENCHMARKS.md").read_text() == report.build(), (
        "BENCHMARKS.md is out of date: run .venv/bin/python benchmarks/report.py"
    )


def test_every_fragment_is_a_section_and_names_an_existing_command():
    fragments = {p.stem for p in (ROOT / "benchmarks" / "results").glob("*.md")}
    assert fragments == set(report.SECTIONS)
    for name in report.SECTIONS:
        _, text, _ = report.section(name)
        assert report.check_commands(name, text) == []
    assert report.check_commands("x", "no command here") != []
    assert report.check_commands("x", "`benchmarks/bench_nothing.py`") != []


def test_the_summary_quotes_each_fragment_and_links_its_section():
    text = report.build()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "](#" in line]
    expected = sum(len(report.section(name)[2]) for name in report.SECTIONS)
    assert len(rows) == expected >= 10
    anchors = {report.slug(report.section(name)[0]) for name in report.SECTIONS}
    assert {re.search(r"\]\(#([^)]+)\)", row).group(1) for row in rows} <= anchors


def test_reliability_md_does_not_repeat_benchmark_figures():
    text = (ROOT / "RELIABILITY.md").read_text()
    assert not re.search(r"\d[\d,.]*\s*(requests/s|req/s)", text)
