"""Reading and writing sparse datasets in the LIBSVM/SVMlight text format.

`read_libsvm` / `load_libsvm` read a whole file (plain, gzip, bzip2 or xz), `iter_libsvm` streams
one in chunks, `LibsvmChunks` streams raw chunks in bounded memory with limits (for storing an
upload as it arrives), `write_libsvm` writes one; malformed input raises `LibsvmFormatError` (a
ValueError) naming the line, a crossed limit `LibsvmLimitError`. The reader's driver is
`solvers.io.reader`, its compiled byte parser `solvers.io.parser`; `export_onnx` builds an ONNX
graph of a fitted linear model.
"""

from solvers.io.errors import LibsvmFormatError, LibsvmLimitError
from solvers.io.reader import LibsvmChunks, LibsvmData, iter_libsvm, load_libsvm, read_libsvm
from solvers.io.writer import write_libsvm

__all__ = [
    "LibsvmChunks",
    "LibsvmData",
    "LibsvmFormatError",
    "LibsvmLimitError",
    "iter_libsvm",
    "load_libsvm",
    "read_libsvm",
    "write_libsvm",
]
