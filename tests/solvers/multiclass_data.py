"""Shared helpers for the multi-class solver tests: datasets, LIBLINEAR models, objectives."""

from functools import cache

import numpy as np
from sklearn.datasets import load_svmlight_file

from tests.conftest import shared_file

# (directory, training file, test file or None, value scale): pendigits holds raw integers up to
# 100; at that scale LIBLINEAR -s 4 itself needs about a minute, so it is divided by 100.
DATASETS = {
    "iris": ("iris", "iris.scale", None, 1.0),
    "wine": ("wine", "wine.scale", None, 1.0),
    "vowel": ("vowel", "vowel.scale", None, 1.0),
    "segment": ("segment", "segment.scale", None, 1.0),
    "dna": ("dna", "dna.scale", "dna.scale.t", 1.0),
    "pendigits": ("pendigits", "pendigits", "pendigits.t", 0.01),
}


@cache
def _load(name: str, split: str):
    folder, train, test, scale = DATASETS[name]
    X, labels = load_svmlight_file(str(shared_file(folder, train)))
    if split == "test":
        X, labels = load_svmlight_file(str(shared_file(folder, test)), n_features=X.shape[1])
    return (X * scale).tocsr(), labels


def load(name: str, split: str = "train"):
    """(X CSR float64, raw labels, class indices, classes) of a shared multi-class set."""
    X, labels = _load(name, split)
    classes = np.unique(_load(name, "train")[1])
    return X, labels, np.searchsorted(classes, labels), classes


def liblinear_weights(model, classes, n_features: int, bias: float):
    """(W (k, n_features), intercepts (k,)) of a LIBLINEAR multi-class model, in our class order."""
    k = len(classes)
    W = np.zeros((k, n_features))
    b = np.zeros(k)
    labels = model.get_labels()
    if k == 2 and model.get_nr_class() == 2 and model.param.solver_type != 4:
        w, b0 = model.get_decfun()
        j = int(np.searchsorted(classes, labels[0]))
        W[j, : len(w)] = w
        b[j] = b0
        W[1 - j] = -W[j]
        b[1 - j] = -b[j]
        return W, b
    for idx, label in enumerate(labels):
        w, b0 = model.get_decfun(idx)
        j = int(np.searchsorted(classes, label))
        W[j, : len(w)] = w
        b[j] = b0 if bias > 0 else 0.0
    return W, b


def cs_primal(X, y, W, b, C, bias):
    """½Σ‖w̃_m‖² + C Σ_i max_m (e_i^m + w̃_mᵀx̃_i − w̃_{y_i}ᵀx̃_i), bias weights b/bias included."""
    S = X @ W.T + b
    idx = np.arange(X.shape[0])
    s_y = S[idx, y]
    S = S + 1.0
    S[idx, y] -= 1.0
    reg = np.sum(W * W) + (np.sum((b / bias) ** 2) if bias > 0 else 0.0)
    return 0.5 * reg + C * np.sum(np.maximum(S.max(axis=1) - s_y, 0.0))


def ww_primal(X, y, W, b, C, bias):
    """½Σ‖w̃_m‖² + C Σ_i Σ_{m≠y_i} max(0, 1 − (w̃_{y_i} − w̃_m)ᵀx̃_i)."""
    S = X @ W.T + b
    idx = np.arange(X.shape[0])
    L = np.maximum(0.0, 1.0 - S[idx, y][:, None] + S)
    L[idx, y] = 0.0
    reg = np.sum(W * W) + (np.sum((b / bias) ** 2) if bias > 0 else 0.0)
    return 0.5 * reg + C * L.sum()


def accuracy(X, y, W, b) -> float:
    return 100.0 * float(np.mean(np.argmax(X @ W.T + b, axis=1) == y))


def blobs(n, d, k, seed, *, density=0.7, spread=1.5):
    """Small sparse classification problem with class-dependent means (so W = 0 is not optimal)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    centers = rng.standard_normal((k, d)) * spread
    dense = centers[y] + rng.standard_normal((n, d))
    dense[rng.random((n, d)) > density] = 0.0
    import scipy.sparse as sp

    return sp.csr_matrix(dense), y


# Larger text sets with a separate test file: (directory, training file, test file, unit-length
# rows). news20 holds raw term counts (row norms up to 1e5), where LIBLINEAR -s 4 needs thousands
# of passes (benchmarks/results/multiclass.md); its rows are scaled to unit length, train and test
# alike, as the benchmark's news20-l2 does. sector is already scaled.
TEXT_DATASETS = {
    "news20": ("news20", "news20.bz2", "news20.t.bz2", True),
    "sector": ("sector", "sector.scale.bz2", "sector.t.scale.bz2", False),
}


@cache
def _load_text(name: str):
    from sklearn.preprocessing import normalize

    folder, train, test, unit_rows = TEXT_DATASETS[name]
    X, labels = load_svmlight_file(str(shared_file(folder, train)))
    Xt, labels_t = load_svmlight_file(str(shared_file(folder, test)), n_features=X.shape[1])
    if unit_rows:
        X, Xt = normalize(X), normalize(Xt)
    return X.tocsr(), labels, Xt.tocsr(), labels_t


def load_text(name: str, split: str = "train"):
    """(X CSR float64, raw labels, class indices, classes) of news20 or sector; the test split
    has the training file's number of features."""
    X, labels, Xt, labels_t = _load_text(name)
    classes = np.unique(labels)
    if split == "test":
        X, labels = Xt, labels_t
    y = np.searchsorted(classes, labels)
    if not np.array_equal(classes[np.minimum(y, len(classes) - 1)], labels):
        raise ValueError(f"{name} {split}: labels not seen in training")
    return X, labels, y, classes
