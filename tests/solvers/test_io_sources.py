"""Where the LIBSVM/SVMlight reader reads from: paths, files and streams, compressed or not
(found from the content, not the name)."""

import bz2
import gzip
import io
import lzma

import numpy as np
import pytest

from solvers.io import read_libsvm
from tests.solvers._io_helpers import TEXT, read_text


@pytest.mark.parametrize(
    "compress",
    [lambda b: b, gzip.compress, bz2.compress, lzma.compress],
    ids=["plain", "gz", "bz2", "xz"],
)
def test_compression_is_detected_from_content_not_name(tmp_path, compress):
    path = tmp_path / "upload.tmp"  # an arbitrary name, as an uploaded temporary file has
    path.write_bytes(compress(TEXT))
    expected = read_text(TEXT)[0].toarray()
    np.testing.assert_array_equal(read_libsvm(path)[0].toarray(), expected)
    np.testing.assert_array_equal(read_libsvm(str(path))[0].toarray(), expected)
    with open(path, "rb") as f:
        np.testing.assert_array_equal(read_libsvm(f)[0].toarray(), expected)
    np.testing.assert_array_equal(read_text(compress(TEXT))[0].toarray(), expected)


def test_multistream_gzip_and_a_non_seekable_stream():
    class Pipe(io.RawIOBase):  # hands out a few bytes at a time and cannot seek
        def __init__(self, data):
            self.data = data

        def readable(self):
            return True

        def readinto(self, b):
            n = min(len(b), 3, len(self.data))
            b[:n], self.data = self.data[:n], self.data[n:]
            return n

    X, y = read_libsvm(Pipe(gzip.compress(TEXT) + gzip.compress(TEXT)))
    assert X.shape == (6, 3)
    np.testing.assert_array_equal(y, [1, -1, 1, 1, -1, 1])


def test_a_text_stream_is_refused():
    with pytest.raises(TypeError, match="binary"):
        read_libsvm(io.StringIO("1 1:1\n"))
