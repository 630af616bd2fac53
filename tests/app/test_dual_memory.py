"""MAX_DUAL_VARIABLES' memory, as its description states it: each copy of the dual variables is
8 bytes a variable (2^27 of them: 1 GiB); a solve from scratch holds about one copy, and a
segment of a checkpointed job after its first (started from the last iterate, which it holds
meanwhile) about four. The description said 1 GiB in all. Measured in a fresh process by its peak
resident memory (the solvers' compiled code allocates where tracemalloc does not look)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.config import Settings
from app.services.job_checks import MAX_DUAL_VARIABLES

COPY = 8  # bytes a dual variable takes in one copy (float64)
MEASURE = """
import json, sys, warnings
import numpy as np, scipy.sparse as sp
from app.services.trainers import train_linear_svc
warnings.simplefilter("ignore")

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024

def peak_over(work):
    open("/proc/self/clear_refs", "w").write("5")  # the peak starts again from here
    base = status("VmRSS")
    result = work()
    return result, status("VmHWM") - base

n, k = 50000, 200
X = sp.random(n, 20, density=0.3, format="csr", random_state=0)
y = np.random.default_rng(0).integers(0, k, n).astype(float)
params = {"C": 1.0, "max_iter": 2, "tol": 1e-9, "multi_class": sys.argv[1]}
train_linear_svc(params, X[:300], y[:300] % 3, None, None, 1)  # compiled before measuring
cold, cold_peak = peak_over(lambda: train_linear_svc(params, X, y, None, None, 1))
start = cold.dual  # the last iterate, held while the next segment runs, as a job holds it
cold = None
_, warm_peak = peak_over(lambda: train_linear_svc(params, X, y, None, None, 1, init_dual=start))
print(json.dumps({"cold": cold_peak / (n * k), "warm": warm_peak / (n * k) + 8}))
"""


def _bytes_per_variable(multi_class: str) -> dict[str, float]:
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run(
        [sys.executable, "-c", MEASURE, multi_class],
        cwd=root, capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux peak memory")
@pytest.mark.parametrize("multi_class", ["ovr", "crammer_singer"])
def test_a_dual_variable_takes_the_bytes_the_setting_says(multi_class):
    measured = _bytes_per_variable(multi_class)
    print(multi_class, measured)
    assert COPY <= measured["cold"] <= 1.25 * COPY  # about one copy
    assert 2.5 * COPY < measured["warm"] <= 4.5 * COPY  # more than two, about four (4.1 measured)


def test_the_setting_states_the_bytes_of_its_default():
    description = Settings.model_fields["max_dual_variables"].description
    assert Settings().max_dual_variables == MAX_DUAL_VARIABLES == 2**27
    assert MAX_DUAL_VARIABLES * COPY == 2**30 and "8 bytes a variable (2^27: 1 GiB)" in description
    assert "about four (2^27: about 4 GiB)" in description
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `MAX_DUAL_VARIABLES`"))
    assert "1 GiB at the default" in row and "about 4 GiB at the default" in row
