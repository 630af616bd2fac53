"""Jobs with the `distributed` option: LinearSVC (one-vs-rest, hinge or squared hinge) trained
by `solvers.distributed` on the Dask cluster at DASK_SCHEDULER_ADDRESS.

The job's worker is only the driver: it cuts the stored dataset into row ranges (reading its
``indptr`` alone) and the Dask workers read their rows from storage themselves (the data
directory with file storage; the bucket, by range requests, with S3: `stored_ranges`), so the
dataset never passes through this process. ``tol`` is the target relative duality gap and
``max_iter`` the rounds per class; ``train_accuracy`` is not computed (it would need the data
here); a validation dataset is scored as for any job.
"""

from __future__ import annotations

import numpy as np

from app.services.formats.labels import text_classes
from app.services.trainers import Trained
from solvers._core.progress import finite_or_none

CONNECT_TIMEOUT_S = 30


def distributed_arrays(settings, dataset):
    """Where the Dask workers read the dataset's arrays: its directory with file storage, else
    the objects themselves (`app.services.stored_ranges.ObjectArrays`)."""
    from app.services.stored_ranges import ObjectArrays
    from app.storage import dataset_prefix, get_storage

    local = get_storage(settings).local_path(dataset_prefix(dataset.id))
    if local is not None:
        return local
    return ObjectArrays(settings.storage, settings.storage_timeout_s, dataset.id)


def distributed_trainer(option: dict, directory, n_features: int, classes, address: str):
    """A trainer (the `TRAINERS` signature) that runs on the Dask cluster at ``address``."""

    def train(params: dict, X, y, qid, callback, n_jobs) -> Trained:
        from distributed import Client

        from solvers.distributed import solve_binary, solve_ovr, stored_partitions

        if not address:
            raise RuntimeError("a distributed job needs DASK_SCHEDULER_ADDRESS; it is unset")
        parts = stored_partitions(directory, option["partitions"], n_features)
        if text_classes(classes) is not None:  # y holds the class codes; named by the runner
            labels = [float(k) for k in range(len(classes))]
        else:
            labels = sorted(float(c["label"]) for c in classes)
        weights = params.get("class_weight")
        if isinstance(weights, dict):
            weights = {float(k): float(v) for k, v in weights.items()}
        options = dict(
            loss=params["loss"],
            C=params["C"],
            bias=params["intercept_scaling"] if params["fit_intercept"] else 0.0,
            tol=params["tol"],
            max_rounds=params["max_iter"],
            class_weight=weights,
            random_state=params.get("random_state"),
            time_limit=params.get("time_limit"),
            callback=callback,
        )
        # the default client of this process: Dask actor handles look it up
        with Client(address, timeout=CONNECT_TIMEOUT_S) as client:
            if len(labels) == 2:
                result = solve_binary(parts, client=client, positive_label=labels[1], **options)
            else:
                result = solve_ovr(parts, client=client, **options)
        coef = np.atleast_2d(result.w)
        intercept = np.atleast_1d(np.asarray(result.bias, dtype=np.float64))
        return Trained(
            kind="classifier",
            classes=labels,
            coef=coef,
            intercept=intercept,
            status=str(result.status),
            gap=finite_or_none(result.duality_gap),
            n_iter=int(result.n_iter),
            duality_gap=finite_or_none(result.duality_gap),
            predict=_predictor(coef, intercept, np.asarray(labels)),
        )

    return train


def _predictor(coef, intercept, labels):
    def predict(Z):
        scores = np.asarray(Z @ coef.T) + intercept
        if coef.shape[0] == 1:
            return np.where(scores[:, 0] > 0, labels[1], labels[0])
        return labels[np.argmax(scores, axis=1)]

    return predict
