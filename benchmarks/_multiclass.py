"""Multi-class helpers of the benchmark scripts: the text sets with their test files, LIBLINEAR's
weights in our class order, the Crammer–Singer primal and test accuracy (the benchmarks keep
their own copies: they do not import the tests)."""

from __future__ import annotations

from functools import cache

import numpy as np
from sklearn.datasets import load_svmlight_file

from benchmarks._common import SHARED_DATA

# (directory, training file, test file, unit-length rows): news20 holds raw term counts (row
# norms up to 1e5) and is scaled to unit rows, train and test alike; sector is already scaled.
TEXT_DATASETS = {
    "news20": ("news20", "news20.bz2", "news20.t.bz2", True),
    "sector": ("sector", "sector.scale.bz2", "sector.t.scale.bz2", False),
}


@cache
def _load_text(name: str):
    from sklearn.preprocessing import normalize

    folder, train, test, unit_rows = TEXT_DATASETS[name]
    X, labels = load_svmlight_file(str(SHARED_DATA / folder / train))
    Xt, labels_t = load_svmlight_file(str(SHARED_DATA / folder / test), n_features=X.shape[1])
    if unit_rows:
        X, Xt = normalize(X), normalize(Xt)
    return X.tocsr(), labels, Xt.tocsr(), labels_t


def load_text(name: str, split: str = "train"):
    """(X CSR float64, raw labels, class indices, classes) of news20 or sector."""
    X, labels, Xt, labels_t = _load_text(name)
    classes = np.unique(labels)
    if split == "test":
        X, labels = Xt, labels_t
    return X, labels, np.searchsorted(classes, labels), classes


def liblinear_weights(model, classes, n_features: int, bias: float):
    """(W (k, n_features), intercepts (k,)) of a LIBLINEAR multi-class model, in our order."""
    k = len(classes)
    W = np.zeros((k, n_features))
    b = np.zeros(k)
    for idx, label in enumerate(model.get_labels()):
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


def accuracy(X, y, W, b) -> float:
    return 100.0 * float(np.mean(np.argmax(X @ W.T + b, axis=1) == y))
