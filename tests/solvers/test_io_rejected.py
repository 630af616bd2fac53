"""Input the LIBSVM/SVMlight reader refuses: each malformed line named by its number and text,
input without rows, corrupt compression and invalid options."""

import gzip
import pickle

import numpy as np
import pytest

import solvers.io.reader as reader
from solvers.io import LibsvmFormatError
from tests.solvers._io_helpers import read_text

LONG = b"9" * 100


@pytest.mark.parametrize(
    ("text", "kwargs", "line", "message"),
    [
        (b"1 1:1\n\n# c\nabc 1:1\n", {}, 4, "expected a numeric label, got 'abc'"),
        (b"1,2 1:1\n", {}, 1, "expected a numeric label, got '1,2'"),
        (b"1 1:1\n1 2:abc\n", {}, 2, "expected a numeric value in 'index:value', got '2:abc'"),
        (b"1 2:1.5.5\n", {}, 1, "got '2:1.5.5'"),
        (b"1 2:1e\n", {}, 1, "got '2:1e'"),
        (b"1 2:\n", {}, 1, "got '2:'"),
        (b"1 abc\n", {}, 1, "expected 'index:value', got 'abc'"),
        (b"1 :1\n", {}, 1, "expected 'index:value', got ':1'"),
        (b"1 2.5:1\n", {}, 1, "expected 'index:value', got '2.5:1'"),
        (b"1 3 4\n", {}, 1, "expected 'index:value', got '3'"),
        (b"1 1:1 -2:1\n", {}, 1, "expected a non-negative index, got '-2:1'"),
        (b"1 1:1\n1 0:1\n", {"zero_based": False}, 2, "index 0 in a one-based file"),
        (b"1 3:1 2:1\n", {}, 1, "strictly increasing within a line: got '2:1' after index 3"),
        (b"1 3:1 3:2\n", {}, 1, "duplicate index 3: got '3:2'"),
        (b"1 1:nan\n", {}, 1, "expected a finite value, got '1:nan'"),
        (b"1 1:1\n1 1:-inf\n", {}, 2, "expected a finite value, got '1:-inf'"),
        (b"1 1:1e999\n", {}, 1, "expected a finite value, got '1:1e999'"),
        (b"1 1:1e300\n", {"dtype": np.float32}, 1, "out of range for float32, got '1:1e300'"),
        (b"NaN 1:1\n", {}, 1, "expected a finite label, got 'NaN'"),
        (b"1e400 1:1\n", {}, 1, "expected a finite label, got '1e400'"),
        (b"1 1:1 qid:2\n", {}, 1, "'qid:' may appear once, right after the label, got 'qid:2'"),
        (b"1 qid:x 1:1\n", {}, 1, "expected 'qid:<integer>', got 'qid:x'"),
        (b"1 99999999999:1\n", {}, 1, "index too large"),
        (b"1 5:1\n", {"n_features": 4}, 1, "index 5 is out of range for n_features=4"),
        (b"1 1:1\n1 4:1\n", {"n_features": 4, "zero_based": True}, 2, "got '4:1'"),
        (b"1 0:1\n1 4:1\n", {"n_features": 4}, 2, "index 4 is out of range for n_features=4"),
        (b"1 1:1\n1 2:1 \x00\n", {}, 2, "not a text file: NUL byte at column 7"),
        (b"1 1:1\n\xff\xfe1 1:1\n", {}, 2, "not a text file: invalid UTF-8 at column 1"),
        (b"1 1:1\n1 1:1 # \xe9t\xe9\n", {}, 2, "not a text file: invalid UTF-8 at column 9"),
        (b"\x00\x00\x00\x00\n", {}, 1, "not a text file: NUL byte"),
        (b"1 1:" + LONG + b"x\n", {}, 1, "got '1:" + "9" * 55 + "...'"),
    ],
)
def test_malformed_lines_are_rejected_naming_the_line_and_the_text(text, kwargs, line, message):
    with pytest.raises(LibsvmFormatError) as err:
        read_text(text, **kwargs)
    assert isinstance(err.value, ValueError)
    assert err.value.line == line
    assert str(err.value).startswith(f"line {line}: ")
    assert message in str(err.value)


def test_the_error_keeps_its_line_through_pickling():
    with pytest.raises(LibsvmFormatError) as err:
        read_text(b"1 1:1\n1 x\n")
    copy = pickle.loads(pickle.dumps(err.value))
    assert (type(copy), str(copy), copy.line) == (LibsvmFormatError, str(err.value), 2)


@pytest.mark.parametrize("text", [b"", b"\n\n", b"# only a comment\n  \n"])
def test_input_without_rows_is_rejected(text):
    with pytest.raises(LibsvmFormatError, match="no data rows") as err:
        read_text(text)
    assert err.value.line is None


def test_line_numbers_count_across_chunks(monkeypatch):
    monkeypatch.setattr(reader, "_CHUNK_BYTES", 16)
    text = b"".join(b"1 1:1 2:2\n" if i % 3 else b"# comment line\n" for i in range(200))
    with pytest.raises(LibsvmFormatError, match=r"^line 201: expected a numeric label, got 'x'"):
        read_text(text + b"x 1:1\n")


def test_corrupt_compressed_input_is_a_format_error(tmp_path):
    data = gzip.compress(b"1 1:1\n" * 10000)
    with pytest.raises(LibsvmFormatError, match="corrupt or truncated gzip"):
        read_text(data[: len(data) // 2])
    with pytest.raises(LibsvmFormatError, match="corrupt or truncated bzip2"):
        read_text(b"BZh9" + b"\x00" * 100)


@pytest.mark.parametrize(
    ("n_features", "zero_based", "dtype", "error"),
    [
        (-1, "auto", np.float64, ValueError),
        (2.5, "auto", np.float64, TypeError),
        (None, "yes", np.float64, ValueError),
        (None, "auto", np.int64, ValueError),
    ],
)
def test_invalid_options_are_rejected_before_reading(n_features, zero_based, dtype, error):
    with pytest.raises(error):
        read_text(b"1 1:1\n", n_features=n_features, zero_based=zero_based, dtype=dtype)
