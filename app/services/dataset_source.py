"""A stored dataset read in a model's columns, a chunk of rows at a time.

A stored dataset's arrays are in its own file's numbering (its ``zero_based``); they are mapped to
the model's columns through the raw file indices both share, so a stored file predicts the same as
its lines sent to ``predict``. The arrays are memory-mapped and read a chunk at a time, so a
prediction over a large dataset does not hold it in the API process's memory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from app.services.array_cache import DOWNLOAD_TRIES
from app.services.dataset_files import align_columns
from app.services.prediction import OVERFLOW, LinearModel, first_overflow

CHUNK_ROWS = 8192
# Decision values (and probabilities) scored at once, and about as many stored entries: a chunk
# of CHUNK_ROWS rows of 1,000 classes held 65 MB of decision values, and as much again in each
# copy (probabilities, their targets); a job's training accuracy once asked for 916 MiB so.
SCORE_ENTRIES = 1 << 20


def score_rows(columns: int) -> int:
    """Rows scored at once when each row has `columns` values: SCORE_ENTRIES in all."""
    return max(1, SCORE_ENTRIES // max(1, columns))


def row_slices(indptr, n_rows: int, step: int):
    """Row ranges of at most `step` rows holding at most SCORE_ENTRIES stored entries (a row
    holding more is a range of its own); `indptr` None for dense rows (sliced as views)."""
    start = 0
    while start < n_rows:
        stop = min(start + step, n_rows)
        if indptr is not None:
            end = int(indptr[start]) + SCORE_ENTRIES  # a Python int: an int32 indptr would wrap
            # searched among the chunk's own offsets: numpy compares a Python int with an int32
            # array by casting all of it to int64, and did so for every chunk (a 100-million-row
            # dataset: 800 MB copied each time, 12,800 times)
            window = np.asarray(indptr[start : stop + 1])
            fits = start + int(np.searchsorted(window, end, side="right")) - 1
            stop = max(start + 1, min(stop, fits))
        yield start, stop
        start = stop


class DatasetMismatch(ValueError):
    """A stored dataset that cannot be read in the model's feature space."""


def finite_rows(D: np.ndarray, start: int) -> np.ndarray:
    """D, the decision values of a chunk of a stored dataset's rows from row `start`, unless
    one overflowed: a DatasetMismatch naming the row."""
    index = first_overflow(D)
    if index is not None:
        raise DatasetMismatch(f"row {start + index} of the dataset (counting from 0): {OVERFLOW}")
    return D


class DatasetSource:
    """Where a stored dataset's arrays are (a local directory, found when first needed: the
    storage's own, or the local copy of an object-stored dataset), and their numbering."""

    def __init__(self, locate: Callable[[], Path], n_features: int, zero_based: bool):
        self._locate, self._directory = locate, None
        self.n_features, self.zero_based = n_features, zero_based
        self.label_names: list[str] | None = None
        self.feature_names: list[str] | None = None  # a table's column names

    @classmethod
    def of(cls, settings, dataset, tries: int = DOWNLOAD_TRIES) -> DatasetSource:
        """From a ``tables.Dataset`` row (`tries`: see `datasets.dataset_arrays`)."""
        from app.services.datasets import dataset_arrays
        from app.services.formats.labels import text_classes

        source = cls(
            lambda: dataset_arrays(settings, dataset, tries), dataset.n_features, dataset.zero_based
        )
        source.label_names = text_classes(dataset.classes)  # y holds codes of these names
        source.feature_names = dataset.feature_names
        return source

    @property
    def directory(self) -> Path:
        if self._directory is None:
            self._directory = Path(self._locate())
        return self._directory

    def check(self, model: LinearModel) -> None:
        """Raise DatasetMismatch if the dataset cannot be read in the model's columns: a raw
        index 0 (a zero-based file's column 0) has no column in a one-based model, or a table
        naming some of the model's features and columns that are none of them."""
        self.placement(model)
        if self.zero_based and not model.zero_based:
            indices = np.load(self.directory / "indices.npy", mmap_mode="r")
            if indices.size and int(indices.min()) == 0:
                raise DatasetMismatch(
                    "the dataset uses feature index 0, but the model's training file is one-based"
                )

    def placement(self, model: LinearModel) -> np.ndarray | None:
        """The model column of each of the dataset's columns (`column_placement`), or None."""
        return column_placement(self.feature_names, model.feature_index)

    def features_beyond(self, model: LinearModel) -> int:
        """How many of the dataset's features the model does not have (ignored, as LIBLINEAR's
        predict ignores them): its columns past the model's, in the model's numbering."""
        if self.placement(model) is not None:
            return 0
        shift = (0 if self.zero_based else 1) - (0 if model.zero_based else 1)
        return max(0, self.n_features + shift - model.n_features)

    def chunks(self, model: LinearModel, rows: int | None = None):
        """Yield (first row, X chunk in the model's columns, y chunk) over the dataset, `rows`
        rows at a time (default CHUNK_ROWS), fewer where their decision values and
        probabilities, or their stored entries, would be more than SCORE_ENTRIES (`row_slices`).

        The arrays are memory-mapped and read a chunk at a time, so a prediction over a large
        dataset does not hold it in the API process's memory."""
        arrays = {
            name: np.load(self.directory / f"{name}.npy", mmap_mode="r")
            for name in ("data", "indices", "indptr", "y")
        }
        indptr = arrays["indptr"]
        n_rows = len(indptr) - 1
        step = min(rows or CHUNK_ROWS, score_rows(model.n_outputs + len(model.classes)))
        placement = self.placement(model)
        for start, stop in row_slices(indptr, n_rows, step):
            lo, hi = int(indptr[start]), int(indptr[stop])
            X = sp.csr_matrix(
                (
                    np.asarray(arrays["data"][lo:hi]),
                    np.asarray(arrays["indices"][lo:hi]),
                    np.asarray(indptr[start : stop + 1]) - lo,
                ),
                shape=(stop - start, self.n_features),
            )
            if placement is not None:
                X = by_name(X, placement, model.n_features)
            else:
                try:
                    X = align_columns(X, self.zero_based, model.zero_based, model.n_features)
                except ValueError as exc:
                    raise DatasetMismatch(str(exc)) from None
            yield start, X, np.asarray(arrays["y"][start:stop], dtype=np.float64)


def by_name(X: sp.csr_matrix, placement: np.ndarray, n_features: int) -> sp.csr_matrix:
    """X's columns moved to the model columns `placement` gives them (see `placement`)."""
    placed = sp.csr_matrix(
        (X.data, placement[X.indices], X.indptr), shape=(X.shape[0], n_features), copy=True
    )
    placed.sort_indices()  # in place: a copy, as the stored arrays are read-only maps
    return placed


def column_placement(names: list[str] | None, index: dict[str, int] | None) -> np.ndarray | None:
    """The model column (`index`: of each of the model's feature names) of each of a table's
    columns `names`, when they are all the model's features: they are placed by name, as a CSV
    header sent to /invocations is (read by position, the same columns in another order scored
    every row on the wrong features). None: read by position (no names, or names none of which
    is the model's). Names partly the model's are a DatasetMismatch naming one that is not."""
    if not names or index is None:
        return None
    unknown = [name for name in names if name not in index]
    if not unknown:
        return np.array([index[name] for name in names], dtype=np.int64)
    if len(unknown) == len(names):
        return None
    raise DatasetMismatch(
        f"the dataset's column {unknown[0][:80]!r} is none of the model's features, while "
        "others are: its columns are placed by name, so each must be one of the model's"
    )
