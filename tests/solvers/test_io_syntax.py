"""The syntax the LIBSVM/SVMlight reader accepts (labels, comments, line ends, qid, index base,
numbers exactly as Python's float), read the same wherever its buffers end."""

import gzip
import io

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file

import solvers.io as sio
import solvers.io.reader as reader
from solvers.io import load_libsvm, read_libsvm
from tests.conftest import shared_file
from tests.solvers._io_helpers import assert_same, random_problem, read_text


def test_labels_integer_real_signed_and_scientific():
    _, y = read_text(b"+1 1:1\n-1.0 1:1\n2\n1e1 1:1\n-.5\n3. 2:1\n4E-1\n")
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
    X, y = read_text(text)
    np.testing.assert_array_equal(y, [1, -1, 2])
    np.testing.assert_array_equal(X.toarray(), [[0.5, 0, 2, 0], [0, 1e-3, 0, -200.0], [1, 0, 0, 0]])
    A, b = load_svmlight_file(io.BytesIO(text))
    assert_same(X, y, A, b)


def test_a_utf8_byte_order_mark_is_skipped():
    X, y = read_text(b"\xef\xbb\xbf-1 2:1\n1 1:1\n")
    np.testing.assert_array_equal(y, [-1, 1])
    assert X.shape == (2, 2)


def test_rows_without_features_and_explicit_zeros():
    X, y = read_text(b"1\n-1 2:0 3:1\n1 \n")
    assert X.shape == (3, 3)
    np.testing.assert_array_equal(np.diff(X.indptr), [0, 2, 0])
    np.testing.assert_array_equal(X.data, [0.0, 1.0])


def test_qid_fields_are_returned_when_asked():
    text = b"3 qid:1 1:1\n2 qid:1 2:1\n1 qid:-7 1:0.5\n0 1:2\n"
    X, y, qid = read_text(text, query_id=True)
    np.testing.assert_array_equal(qid, [1, 1, -7, 0])  # no qid: 0, as SVMlight
    A, b, q = load_svmlight_file(io.BytesIO(text[:-7]), query_id=True)
    assert_same(X[:3], y[:3], A, b)
    np.testing.assert_array_equal(qid[:3], q)
    assert len(read_text(text)) == 2
    assert load_libsvm(io.BytesIO(text)).qid.tolist() == [1, 1, -7, 0]
    assert load_libsvm(io.BytesIO(b"1 1:1\n")).qid is None
    np.testing.assert_array_equal(read_text(b"1 1:1\n", query_id=True)[2], [0])


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
    X, y = read_text(("0 " + line + "\n").encode())
    np.testing.assert_array_equal(X.data.view(np.int64), expected[keep].view(np.int64))
    _, labels = read_text("\n".join(np.array(tokens)[keep]).encode())
    np.testing.assert_array_equal(labels.view(np.int64), expected[keep].view(np.int64))
    keep &= np.abs(expected) < 3e38
    line = " ".join(f"{i + 1}:{t}" for i, t in enumerate(np.array(tokens)[keep]))
    X32, _ = read_text(("0 " + line + "\n").encode(), dtype=np.float32)
    assert X32.dtype == np.float32
    np.testing.assert_array_equal(X32.data, expected[keep].astype(np.float32))


def test_lines_split_across_chunks_read_the_same(monkeypatch):
    path = shared_file("heart_scale", "heart_scale")
    X, y = read_libsvm(path)
    for size in (7, 64, 1000):  # 7 bytes: shorter than any line, the buffer must grow
        monkeypatch.setattr(reader, "_CHUNK_BYTES", size)
        X2, y2 = read_libsvm(path)
        assert_same(X2, y2, X, y)


@pytest.mark.parametrize("compress", [gzip.compress, None], ids=["gz", "plain"])
def test_sizes_extrapolated_from_the_first_buffers_give_the_same_result(
    tmp_path, monkeypatch, compress
):
    rng = np.random.default_rng(4)
    X, y = random_problem(rng, rows=2000, cols=300)
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
    assert_same(X2, y2, X, y)
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
