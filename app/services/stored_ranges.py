"""A stored dataset's arrays read in place from object storage, for the Dask workers of a
distributed job.

`solvers.distributed.StoredRows` reads a partition's row range of each 1-D `.npy` array through an
``arrays`` opener (``open(name)`` → a seekable binary file, ``exists(name)``). `ObjectArrays`
opens an object of the bucket as such a file: each read is one HTTP range request through the
storage's boto3 client, so a Dask worker downloads the bytes of its own rows and nothing else,
and the dataset never passes through the job's worker. The opener carries only the storage URL,
its timeout and the dataset's prefix (it is pickled to the workers, which build their own client
from the usual AWS_* variables).
"""

from __future__ import annotations

import io

from app.storage import _cached, dataset_prefix

BUFFER = 1 << 20  # small reads (an array's header) come from one 1 MiB request


class ObjectArrays:
    """The arrays of dataset ``dataset_id`` in the storage at ``url``."""

    def __init__(self, url: str, timeout_s: float, dataset_id: str):
        self.url, self.timeout_s, self.prefix = url, timeout_s, dataset_prefix(dataset_id)

    def _storage(self):
        return _cached(self.url, self.timeout_s)

    def open(self, name: str):
        storage = self._storage()
        key = storage._key(f"{self.prefix}/{name}.npy")
        return io.BufferedReader(_RangeReader(storage.client, storage.bucket, key), BUFFER)

    def exists(self, name: str) -> bool:
        return self._storage().exists(f"{self.prefix}/{name}.npy")


class _RangeReader(io.RawIOBase):
    """One object as a seekable raw file: ``readinto`` is a ranged GET from the position."""

    def __init__(self, client, bucket: str, key: str):
        self.client, self.bucket, self.key = client, bucket, key
        self.size = client.head_object(Bucket=bucket, Key=key)["ContentLength"]
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        n = min(len(view), self.size - self.position)
        if n <= 0:
            return 0
        end = self.position + n - 1
        body = self.client.get_object(
            Bucket=self.bucket, Key=self.key, Range=f"bytes={self.position}-{end}"
        )["Body"]
        got = 0
        for chunk in body.iter_chunks(BUFFER):
            view[got : got + len(chunk)] = chunk
            got += len(chunk)
        self.position += got
        return got
