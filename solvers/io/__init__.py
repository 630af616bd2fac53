"""Reading and writing sparse datasets in the LIBSVM/SVMlight text format.

`read_libsvm` / `load_libsvm` read a whole file (plain, gzip, bzip2 or xz), `iter_libsvm` streams
one in chunks, `write_libsvm` writes one; malformed input raises `LibsvmFormatError` (a
ValueError) naming the line. The reader's driver is `solvers.io.reader`, its compiled byte parser
`solvers.io.parser`.
"""

from solvers.io.errors import LibsvmFormatError
from solvers.io.reader import LibsvmData, iter_libsvm, load_libsvm, read_libsvm
from solvers.io.writer import write_libsvm

__all__ = [
    "LibsvmData",
    "LibsvmFormatError",
    "iter_libsvm",
    "load_libsvm",
    "read_libsvm",
    "write_libsvm",
]
