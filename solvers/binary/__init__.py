"""Binary linear SVMs and regularized least squares by dual coordinate descent.

`solvers.binary.dcd` is the driver (`solve_binary`), `solvers.binary.kernels` its compiled passes.
"""

from solvers.binary.dcd import solve_binary

__all__ = ["solve_binary"]
