"""The LIBSVM/SVMlight reader against scikit-learn's, on real files and on each edge case."""

import bz2
import gzip
import io
import lzma
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file

import solvers.io as sio
import solvers.io.reader as reader
from solvers.io import LibsvmFormatError, load_libsvm, read_libsvm
from tests.conftest import SHARED_DATA, shared_file


def _shared_files():
    if not SHARED_DATA.is_dir():  # the test then skips, or fails under MARGIN_REQUIRE_DATA=1
        return [pytest.param(None, id="shared-data-missing")]
    files = sorted(p for p in SHARED_DATA.glob("*/*") if p.is_file() and p.name != "README.md")
    return [pytest.param(p, id=p.name) for p in files]


def _read(text, **kwargs):
    return read_libsvm(io.BytesIO(text), **kwargs)


def _assert_same(X, y, A, b):
    """Same shape, labels and stored entries (explicit zeros included) as scikit-learn's."""
    assert X.shape == A.shape
    assert X.dtype == A.dtype
    np.testing.assert_array_equal(y, b)
    assert (X - A).count_nonzero() == 0
    np.testing.assert_array_equal(X.indptr, A.indptr)
    np.testing.assert_array_equal(X.indices, A.indices)
    np.testing.assert_array_equal(X.data, A.data)  # stored zeros kept as entries


@pytest.mark.parametrize("path", _shared_files())
def test_every_shared_file_reads_as_scikit_learn_reads_it(path):
    if path is None:
        shared_file("README.md")
    text = path.read_bytes()
    if path.suffix == ".bz2":  # decompress once for both readers (the slow part)
        text = bz2.decompress(text)
    X, y = _read(text)
    A, b = load_svmlight_file(io.BytesIO(text))
    _assert_same(X, y, A, b)
    assert X.indices.dtype == np.int32 and X.indptr.dtype == np.int32
    assert y.dtype == np.float64


def test_float32_files_match_scikit_learn_float32_and_stay_float32():
    text = bz2.decompress(shared_file("reuters-money-fx", "reuters.tst.bz2").read_bytes())
    X, y = _read(text, dtype=np.float32)  # values in capital-E notation
    A, b = load_svmlight_file(io.BytesIO(text), dtype=np.float32)
    _assert_same(X, y, A, b)
    assert X.dtype == np.float32


def test_explicit_zeros_are_stored_entries():
    path = shared_file("australian", "australian")  # 1,936 explicit k:0 entries
    X, _ = read_libsvm(path)
    assert X.nnz == 9660
    assert np.count_nonzero(X.data == 0) == 1936


def test_w8a_keeps_its_rows_without_features():
    X, y = read_libsvm(shared_file("w8a", "w8a.bz2"))
    assert X.shape == (49749, 300)
    assert np.count_nonzero(np.diff(X.indptr) == 0) == 4203
    assert set(np.unique(y)) == {-1.0, 1.0}


def test_a_test_file_reads_with_its_training_files_dimension():
    train = load_libsvm(shared_file("a9a", "a9a.bz2"))
    assert (train.n_features, train.zero_based) == (123, False)
    X, _ = read_libsvm(shared_file("a9a", "a9a.t"), n_features=train.n_features)
    assert X.shape == (16281, 123)
    assert read_libsvm(shared_file("a9a", "a9a.t"))[0].shape == (16281, 122)


def test_a_too_small_n_features_names_the_first_line_beyond_it():
    path = shared_file("a9a", "a9a.t")
    with pytest.raises(LibsvmFormatError) as err:
        read_libsvm(path, n_features=100)
    A, _ = load_svmlight_file(str(path))
    wide_rows = np.flatnonzero(np.diff(A[:, 100:].tocsr().indptr))  # rows with an index > 100
    assert err.value.line == wide_rows[0] + 1
    assert str(err.value).startswith(f"line {wide_rows[0] + 1}: index ")
    assert "n_features=100" in str(err.value)


def test_zero_based_files_are_detected_and_can_be_forced():
    path = shared_file("phishing", "phishing.t")
    data = load_libsvm(path)
    assert (data.zero_based, data.n_features) == (True, 68)
    X1, _ = read_libsvm(path, zero_based=True)
    _assert_same(data.X, data.y, X1, data.y)
    with pytest.raises(LibsvmFormatError, match=r"^line \d+: index 0 in a one-based file"):
        read_libsvm(path, zero_based=False)


# ---- accepted syntax -------------------------------------------------------------------------


def test_labels_integer_real_signed_and_scientific():
    _, y = _read(b"+1 1:1\n-1.0 1:1\n2\n1e1 1:1\n-.5\n3. 2:1\n4E-1\n")
    np.testing.assert_array_equal(y, [1.0, -1.0, 2.0, 10.0, -0.5, 3.0, 0.4])


def test_comments_blank_lines_crlf_tabs_and_a_last_line_without_newline():
    text = (
        b"# header comment\r\n"
        b"\r\n"
        b"   \t \n"
        b"1 1:0.5 3:2 # trailing comment with UTF-8 \xc3\xa9\r\n"
        b"-1\t2:1e-3\t\t4:-2E+2#glued comment\n"
        b"  # indented comment\n"
        b"2 1:1"
    )
    X, y = _read(text)
    np.testing.assert_array_equal(y, [1, -1, 2])
    np.testing.assert_array_equal(X.toarray(), [[0.5, 0, 2, 0], [0, 1e-3, 0, -200.0], [1, 0, 0, 0]])
    A, b = load_svmlight_file(io.BytesIO(text))
    _assert_same(X, y, A, b)


def test_a_utf8_byte_order_mark_is_skipped():
    X, y = _read(b"\xef\xbb\xbf-1 2:1\n1 1:1\n")
    np.testing.assert_array_equal(y, [-1, 1])
    assert X.shape == (2, 2)


def test_rows_without_features_and_explicit_zeros():
    X, y = _read(b"1\n-1 2:0 3:1\n1 \n")
    assert X.shape == (3, 3)
    np.testing.assert_array_equal(np.diff(X.indptr), [0, 2, 0])
    np.testing.assert_array_equal(X.data, [0.0, 1.0])


def test_qid_fields_are_returned_when_asked():
    text = b"3 qid:1 1:1\n2 qid:1 2:1\n1 qid:-7 1:0.5\n0 1:2\n"
    X, y, qid = _read(text, query_id=True)
    np.testing.assert_array_equal(qid, [1, 1, -7, 0])  # no qid: 0, as SVMlight
    A, b, q = load_svmlight_file(io.BytesIO(text[:-7]), query_id=True)
    _assert_same(X[:3], y[:3], A, b)
    np.testing.assert_array_equal(qid[:3], q)
    assert len(_read(text)) == 2
    assert load_libsvm(io.BytesIO(text)).qid.tolist() == [1, 1, -7, 0]
    assert load_libsvm(io.BytesIO(b"1 1:1\n")).qid is None
    np.testing.assert_array_equal(_read(b"1 1:1\n", query_id=True)[2], [0])


@pytest.mark.parametrize(
    ("text", "zero_based", "expected_base", "shape"),
    [
        (b"1 1:1 3:1\n", "auto", False, (1, 3)),
        (b"1 0:1 3:1\n", "auto", True, (1, 4)),
        (b"1 1:1 3:1\n", True, True, (1, 4)),
        (b"1 1:1 3:1\n", False, False, (1, 3)),
        (b"1\n2\n", "auto", False, (2, 0)),
    ],
)
def test_index_base(text, zero_based, expected_base, shape):
    data = load_libsvm(io.BytesIO(text), zero_based=zero_based)
    assert data.zero_based is expected_base
    assert data.X.shape == shape and data.n_features == shape[1]
    if shape[1]:
        assert data.X[0, shape[1] - 1] == 1.0


def test_numbers_convert_exactly_as_python_float_does():
    rng = np.random.default_rng(0)
    tokens = [
        "0.1", "-0.0", "0", "1e-400", "4.9e-324", "2.2250738585072014e-308",
        "1.7976931348623157e308", "9007199254740993", "123456789012345678901234567890",
        "0.30000000000000004", "1.00000000000000000000000001", "7.1e22", "1e23", "5e-324",
        ".5", "5.", "+3", "00012.500", "1E5", "1e+5", "0.000000000000000000000000123456789",
    ]  # fmt: skip
    for _ in range(3000):
        digits = "".join(rng.choice(list("0123456789"), size=int(rng.integers(1, 25))))
        point = int(rng.integers(0, len(digits) + 1))
        text = f"{digits[:point]}.{digits[point:]}" if point < len(digits) else digits
        exponent = f"e{int(rng.integers(-330, 310))}" if rng.random() < 0.4 else ""
        tokens.append(("-" if rng.random() < 0.3 else "") + text + exponent)
    expected = np.array([float(t) for t in tokens])
    keep = np.isfinite(expected)
    line = " ".join(f"{i + 1}:{t}" for i, t in enumerate(np.array(tokens)[keep]))
    X, y = _read(("0 " + line + "\n").encode())
    np.testing.assert_array_equal(X.data.view(np.int64), expected[keep].view(np.int64))
    _, labels = _read("\n".join(np.array(tokens)[keep]).encode())
    np.testing.assert_array_equal(labels.view(np.int64), expected[keep].view(np.int64))
    keep &= np.abs(expected) < 3e38
    line = " ".join(f"{i + 1}:{t}" for i, t in enumerate(np.array(tokens)[keep]))
    X32, _ = _read(("0 " + line + "\n").encode(), dtype=np.float32)
    assert X32.dtype == np.float32
    np.testing.assert_array_equal(X32.data, expected[keep].astype(np.float32))


def test_lines_split_across_chunks_read_the_same(monkeypatch):
    path = shared_file("heart_scale", "heart_scale")
    X, y = read_libsvm(path)
    for size in (7, 64, 1000):  # 7 bytes: shorter than any line, the buffer must grow
        monkeypatch.setattr(reader, "_CHUNK_BYTES", size)
        X2, y2 = read_libsvm(path)
        _assert_same(X2, y2, X, y)


@pytest.mark.parametrize("compress", [gzip.compress, None], ids=["gz", "plain"])
def test_sizes_extrapolated_from_the_first_buffers_give_the_same_result(
    tmp_path, monkeypatch, compress
):
    rng = np.random.default_rng(4)
    X, y = _random_problem(rng, rows=2000, cols=300)
    plain = tmp_path / "big.svm"
    sio.write_libsvm(plain, X, y)
    path = plain
    if compress:
        path = tmp_path / "big.upload"
        path.write_bytes(compress(plain.read_bytes()))
    monkeypatch.setattr(reader, "_CHUNK_BYTES", 16384)  # extrapolate after 16 KiB (256 compressed)
    reserved = []
    original = reader._Outputs.reserve
    monkeypatch.setattr(
        reader._Outputs, "reserve", lambda self, r, n: reserved.append(n) or original(self, r, n)
    )
    X2, y2 = read_libsvm(path, n_features=300)
    _assert_same(X2, y2, X, y)
    extrapolated = [n for n in reserved if n >= 0.8 * X.nnz]
    assert len(extrapolated) == 1 and extrapolated[0] <= 1.5 * X.nnz


def test_index_arrays_widen_to_int64_when_the_entry_count_needs_it(monkeypatch):
    indptr, indices = np.array([0, 3, 5], dtype=np.int64), np.arange(5, dtype=np.int32)
    small = reader._index_arrays(indptr, indices)
    assert small[0].dtype == np.int32 and small[1] is indices
    monkeypatch.setattr(reader, "INT32_ENTRIES", 4)
    wide = reader._index_arrays(indptr, indices)
    assert wide[0] is indptr and wide[1].dtype == np.int64
    np.testing.assert_array_equal(wide[1], indices)


# ---- rejected input --------------------------------------------------------------------------

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
        _read(text, **kwargs)
    assert isinstance(err.value, ValueError)
    assert err.value.line == line
    assert str(err.value).startswith(f"line {line}: ")
    assert message in str(err.value)


def test_the_error_keeps_its_line_through_pickling():
    with pytest.raises(LibsvmFormatError) as err:
        _read(b"1 1:1\n1 x\n")
    copy = pickle.loads(pickle.dumps(err.value))
    assert (type(copy), str(copy), copy.line) == (LibsvmFormatError, str(err.value), 2)


@pytest.mark.parametrize("text", [b"", b"\n\n", b"# only a comment\n  \n"])
def test_input_without_rows_is_rejected(text):
    with pytest.raises(LibsvmFormatError, match="no data rows") as err:
        _read(text)
    assert err.value.line is None


def test_line_numbers_count_across_chunks(monkeypatch):
    monkeypatch.setattr(reader, "_CHUNK_BYTES", 16)
    text = b"".join(b"1 1:1 2:2\n" if i % 3 else b"# comment line\n" for i in range(200))
    with pytest.raises(LibsvmFormatError, match=r"^line 201: expected a numeric label, got 'x'"):
        _read(text + b"x 1:1\n")


def test_corrupt_compressed_input_is_a_format_error(tmp_path):
    data = gzip.compress(b"1 1:1\n" * 10000)
    with pytest.raises(LibsvmFormatError, match="corrupt or truncated gzip"):
        _read(data[: len(data) // 2])
    with pytest.raises(LibsvmFormatError, match="corrupt or truncated bzip2"):
        _read(b"BZh9" + b"\x00" * 100)


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
        _read(b"1 1:1\n", n_features=n_features, zero_based=zero_based, dtype=dtype)


# ---- sources ---------------------------------------------------------------------------------

TEXT = b"1 1:0.5 3:1\n-1 2:2\n1\n"


@pytest.mark.parametrize(
    "compress",
    [lambda b: b, gzip.compress, bz2.compress, lzma.compress],
    ids=["plain", "gz", "bz2", "xz"],
)
def test_compression_is_detected_from_content_not_name(tmp_path, compress):
    path = tmp_path / "upload.tmp"  # an arbitrary name, as an uploaded temporary file has
    path.write_bytes(compress(TEXT))
    expected = _read(TEXT)[0].toarray()
    np.testing.assert_array_equal(read_libsvm(path)[0].toarray(), expected)
    np.testing.assert_array_equal(read_libsvm(str(path))[0].toarray(), expected)
    with open(path, "rb") as f:
        np.testing.assert_array_equal(read_libsvm(f)[0].toarray(), expected)
    np.testing.assert_array_equal(_read(compress(TEXT))[0].toarray(), expected)


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


# ---- writer ----------------------------------------------------------------------------------


def _random_problem(rng, rows=60, cols=25, dtype=np.float64):
    X = sp.random(rows, cols, density=0.2, format="coo", random_state=rng, dtype=np.float64)
    keep = X.row != 5  # an empty row
    X = sp.csr_matrix((X.data[keep], (X.row[keep], X.col[keep])), shape=(rows, cols))
    X.data = (X.data - 0.5) * 10.0 ** rng.integers(-5, 6, size=X.nnz)
    X.data[::7] = np.round(X.data[::7])
    X.data[3] = 0.0  # a stored zero survives the round trip
    y = rng.choice([-1.0, 1.0, 2.5, 1e-7], size=rows)
    return X.astype(dtype), y


@pytest.mark.parametrize("zero_based", [False, True])
@pytest.mark.parametrize("suffix", ["", ".gz", ".xz"])
def test_write_then_read_gives_identical_arrays(tmp_path, zero_based, suffix):
    rng = np.random.default_rng(1)
    X, y = _random_problem(rng)
    X.data[10] = 0.0
    qid = np.repeat(np.arange(12), 5)
    path = tmp_path / f"data.svm{suffix}"
    sio.write_libsvm(path, X, y, qid=qid, zero_based=zero_based)
    data = load_libsvm(path, n_features=X.shape[1], zero_based=zero_based)
    _assert_same(data.X, data.y, X, y)
    np.testing.assert_array_equal(data.qid, qid)
    if suffix != ".xz":  # scikit-learn reads gzip and bzip2 only
        A, b, q = load_svmlight_file(
            str(path), n_features=X.shape[1], zero_based=zero_based, query_id=True
        )
        _assert_same(data.X, data.y, A, b)
        np.testing.assert_array_equal(q, qid)
    if not zero_based:
        assert load_libsvm(path).zero_based is False


def test_write_float32_and_dense_input(tmp_path):
    rng = np.random.default_rng(2)
    X, y = _random_problem(rng, dtype=np.float32)
    buffer = io.BytesIO()
    sio.write_libsvm(buffer, X, y)
    X2, y2 = read_libsvm(io.BytesIO(buffer.getvalue()), n_features=25, dtype=np.float32)
    _assert_same(X2, y2, X, y)
    buffer = io.BytesIO()
    sio.write_libsvm(buffer, np.array([[0.0, 1.5], [2.0, 0.0]]), [1, -1])
    assert buffer.getvalue() == b"1 2:1.5\n-1 1:2\n"


def test_write_rejects_what_the_format_cannot_hold(tmp_path):
    X = sp.csr_matrix(np.array([[np.nan, 1.0]]))
    with pytest.raises(ValueError, match="NaN or infinite"):
        sio.write_libsvm(tmp_path / "x", X, [1.0])
    with pytest.raises(ValueError, match=r"y must have shape \(1,\)"):
        sio.write_libsvm(tmp_path / "x", np.ones((1, 2)), [1.0, 2.0])


# ---- streaming -------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_rows", [1, 7, 1000, 10**6])
def test_iter_libsvm_chunks_concatenate_to_the_whole_file(monkeypatch, chunk_rows):
    monkeypatch.setattr(reader, "_CHUNK_BYTES", 4096)
    path = shared_file("dna", "dna.scale.t")
    X, y = read_libsvm(path, n_features=180, zero_based=False)
    chunks = list(sio.iter_libsvm(path, chunk_rows=chunk_rows, n_features=180, zero_based=False))
    assert all(c[0].shape[0] <= chunk_rows and c[0].shape[1] == 180 for c in chunks)
    assert all(c[0].shape[0] == chunk_rows for c in chunks[:-1])
    _assert_same(
        sp.vstack([c[0] for c in chunks], format="csr"),
        np.concatenate([c[1] for c in chunks]),
        X,
        y,
    )


def test_iter_libsvm_with_qid_compressed_and_float32(tmp_path):
    rng = np.random.default_rng(3)
    X, y = _random_problem(rng, rows=100, dtype=np.float32)
    qid = np.repeat(np.arange(20), 5)
    path = tmp_path / "ranks.svm.bz2"
    sio.write_libsvm(path, X, y, qid=qid)
    chunks = list(
        sio.iter_libsvm(
            path, chunk_rows=30, n_features=25, zero_based=False, dtype=np.float32, query_id=True
        )
    )
    assert [c[0].shape[0] for c in chunks] == [30, 30, 30, 10]
    assert all(c[0].dtype == np.float32 for c in chunks)
    _assert_same(
        sp.vstack([c[0] for c in chunks], format="csr"),
        np.concatenate([c[1] for c in chunks]),
        X,
        y,
    )
    np.testing.assert_array_equal(np.concatenate([c[2] for c in chunks]), qid)


def test_iter_libsvm_errors_name_the_line_of_the_whole_file(monkeypatch):
    monkeypatch.setattr(reader, "_CHUNK_BYTES", 32)
    text = b"1 1:1\n" * 50 + b"1 9:1\n"
    chunks = sio.iter_libsvm(io.BytesIO(text), chunk_rows=8, n_features=5, zero_based=False)
    with pytest.raises(LibsvmFormatError, match=r"^line 51: index out of range for n_features=5"):
        for _ in chunks:
            pass


def test_iter_libsvm_checks_its_options_before_reading():
    with pytest.raises(ValueError, match="explicit n_features and zero_based"):
        sio.iter_libsvm(io.BytesIO(TEXT), chunk_rows=2, n_features=None, zero_based=False)
    with pytest.raises(ValueError, match="explicit n_features and zero_based"):
        sio.iter_libsvm(io.BytesIO(TEXT), chunk_rows=2, n_features=3, zero_based="auto")
    with pytest.raises(ValueError, match="chunk_rows"):
        sio.iter_libsvm(io.BytesIO(TEXT), chunk_rows=0, n_features=3, zero_based=False)
    with pytest.raises(LibsvmFormatError, match="no data rows"):
        list(
            sio.iter_libsvm(
                io.BytesIO(b"# nothing\n"), chunk_rows=2, n_features=3, zero_based=False
            )
        )


def test_the_package_exports_the_reader_and_writer():
    import solvers

    assert solvers.read_libsvm is read_libsvm
    assert solvers.write_libsvm is sio.write_libsvm
