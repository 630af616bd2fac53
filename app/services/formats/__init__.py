"""One dispatch from an upload's format to its reader.

Every reader takes the upload as it arrives (already decompressed and bounded by
`app.limits.open_expanded`) and returns the same thing, a `solvers.io.LibsvmData`: CSR ``X``,
float64 ``y``, ``qid`` or None, the index base and the feature count. Readers raise ValueError
(a 422 naming the problem) or `app.limits.ExpansionTooLarge` (a 413).

Formats:
  libsvm  LIBSVM/SVMlight text (gzip, bzip2 or xz compressed as sent), parsed while it streams;
  npz     a ``scipy.sparse.save_npz`` CSR archive plus a member ``y`` (see `.npz`).

A format is named by the upload (`?format=`) or recognised from the first bytes: a zip archive
is npz, anything else LIBSVM text.
"""

from __future__ import annotations

from typing import BinaryIO

FORMATS = ("libsvm", "npz")
ZIP_MAGIC = b"PK\x03\x04"


def resolve(declared: str | None, head: bytes) -> str:
    """The upload's format: the declared one, else npz for a zip archive, else libsvm."""
    if declared is not None:
        if declared not in FORMATS:
            raise ValueError(f"format: expected one of {', '.join(FORMATS)}, got {declared!r}")
        return declared
    return "npz" if head.startswith(ZIP_MAGIC) else "libsvm"


def read(fmt: str, stream: BinaryIO, source: str, max_expanded: int):
    """Read the upload in `fmt` from `stream` (its plain bytes; `source` is the stored file)."""
    if fmt == "npz":
        from app.services.formats.npz import read_npz

        return read_npz(stream, source, max_expanded)
    from solvers.io import load_libsvm

    return load_libsvm(stream)
