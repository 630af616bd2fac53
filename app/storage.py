"""Where datasets, prediction CSVs and checkpoints live: one setting, STORAGE_URL.

- ``file:///path`` (the default: the data directory): objects are files under the path, so the
  embedded one-command start keeps its layout (`datasets/<id>/<array>.npy`, ...).
- ``s3://bucket/prefix``: objects in an S3-compatible store (MinIO, AWS S3, ...), reached with
  boto3; the endpoint, region and credentials come from the usual AWS environment variables
  (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`).

Keys are the same on both: ``datasets/<id>/<array>.npy``, ``predictions/<run>.csv``,
``checkpoints/<job>.<attempt>.npz``. Every S3 request has connect and read timeouts and no
retry, so that an unreachable store fails a request within STORAGE_TIMEOUT_S
(`StorageUnavailable`, which the API answers with 503) instead of hanging it; a worker's reads (a
dataset's download, a checkpoint's) try again a few times (`retry_unavailable`).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Protocol, TypeVar
from urllib.parse import unquote, urlparse

log = logging.getLogger("margin.storage")
READ_CHUNK = 1 << 20
T = TypeVar("T")


class StorageUnavailable(Exception):
    """The object store could not be reached, or did not answer in time."""


def retry_unavailable(work: Callable[[], T], what: str, tries: int, delay_s: float) -> T:
    """`work()`, tried up to `tries` times while the store is unavailable, waiting `delay_s`,
    then 2 × `delay_s`, ... between tries; the last try's error is raised. Any other error (a
    missing object, a bad file) is raised at once: trying again would not change it."""
    for attempt in range(1, tries + 1):
        try:
            return work()
        except StorageUnavailable as exc:
            if attempt >= tries:
                raise
            log.warning("%s: %s; trying again (%d of %d)", what, exc, attempt + 1, tries)
            time.sleep(delay_s * attempt)
    raise ValueError(f"tries must be at least 1, got {tries}")


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int
    modified: datetime


class Storage(Protocol):
    url: str

    def store_file(self, path: Path, key: str) -> None:
        """Put the local file `path` at `key` (the local file is consumed)."""

    def store_dir(self, directory: Path, prefix: str) -> None:
        """Put each file of `directory` at `prefix/<name>` (the directory is consumed)."""

    def put(self, key: str, data: bytes) -> None:
        """Put a few bytes at `key` (replacing what is there)."""

    def fetch(self, key: str, path: Path) -> None:
        """Write the object at `key` to the local file `path` (FileNotFoundError if absent)."""

    def read(self, key: str) -> Iterator[bytes]:
        """The object's bytes, a chunk at a time (FileNotFoundError if absent)."""

    def exists(self, key: str) -> bool: ...

    def size(self, key: str) -> int | None:
        """The object's size in bytes, None when there is none at `key`."""

    def list(self, prefix: str) -> list[StoredObject]:
        """Every object whose key starts with `prefix`."""

    def delete(self, key: str) -> None: ...

    def delete_prefix(self, prefix: str) -> int:
        """Remove every object under `prefix`; returns how many."""

    def local_path(self, key: str) -> Path | None:
        """Where the object is on this machine's disk, when the storage is a local directory."""

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (a no-op for a directory)."""


class FileStorage:
    """Objects as files under a directory (the data directory by default)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.url = f"file://{self.root}"

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise ValueError(f"storage key outside the storage root: {key!r}")
        return path

    def local_path(self, key: str) -> Path | None:
        return self._path(key)

    def store_file(self, path: Path, key: str) -> None:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        _move(Path(path), target)

    def store_dir(self, directory: Path, prefix: str) -> None:
        target = self._path(prefix)
        target.parent.mkdir(parents=True, exist_ok=True)
        _move(Path(directory), target)  # one rename: the dataset appears whole or not at all

    def put(self, key: str, data: bytes) -> None:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    def fetch(self, key: str, path: Path) -> None:
        shutil.copyfile(self._path(key), path)

    def read(self, key: str) -> Iterator[bytes]:
        with open(self._path(key), "rb") as f:
            while chunk := f.read(READ_CHUNK):
                yield chunk

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def size(self, key: str) -> int | None:
        path = self._path(key)
        return path.stat().st_size if path.is_file() else None

    def list(self, prefix: str) -> list[StoredObject]:
        base = self._path(prefix) if prefix else self.root
        if base.is_file():
            paths = [base]
        else:
            start = base if base.is_dir() else base.parent
            paths = [p for p in start.rglob("*") if p.is_file()] if start.is_dir() else []
        root, out = self.root.resolve(), []
        for path in sorted(paths):
            key = path.resolve().relative_to(root).as_posix()
            if key.startswith(prefix):
                stat = path.stat()
                out.append(
                    StoredObject(key, stat.st_size, datetime.fromtimestamp(stat.st_mtime, UTC))
                )
        return out

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def delete_prefix(self, prefix: str) -> int:
        path = self._path(prefix)
        if path.is_dir():
            count = sum(1 for p in path.rglob("*") if p.is_file())
            shutil.rmtree(path, ignore_errors=True)
            return count
        objects = self.list(prefix)
        for obj in objects:
            self.delete(obj.key)
        return len(objects)

    def ensure_bucket(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)


def _move(source: Path, target: Path) -> None:
    """Rename `source` to `target`; across file systems, copy next to the target first and
    rename that, so the target still appears whole or not at all."""
    try:
        os.replace(source, target)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    staging = target.with_name(f".{target.name}.{os.getpid()}.part")
    if source.is_dir():
        shutil.copytree(source, staging)
    else:
        shutil.copyfile(source, staging)
    os.replace(staging, target)
    shutil.rmtree(source) if source.is_dir() else source.unlink()


class S3Storage:
    """Objects in an S3 bucket under a prefix, through boto3."""

    def __init__(self, bucket: str, prefix: str, timeout_s: float, url: str):
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.url, self.bucket = url, bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        # One try, so that an unreachable store fails a request within timeout_s (botocore's
        # retries back off for seconds); callers that can wait (a worker's download) retry.
        config = Config(
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            retries={"total_max_attempts": 1},
            max_pool_connections=16,
        )
        self.client = boto3.session.Session().client("s3", config=config)
        self.transfer = TransferConfig(
            multipart_threshold=64 << 20, multipart_chunksize=16 << 20, max_concurrency=4
        )

    def _key(self, key: str) -> str:
        return self.prefix + key

    def local_path(self, key: str) -> Path | None:
        return None

    def store_file(self, path: Path, key: str) -> None:
        with _errors(key):
            self.client.upload_file(str(path), self.bucket, self._key(key), Config=self.transfer)
        Path(path).unlink(missing_ok=True)

    def store_dir(self, directory: Path, prefix: str) -> None:
        directory = Path(directory)
        for path in sorted(directory.iterdir()):
            with _errors(path.name):
                self.client.upload_file(
                    str(path), self.bucket, self._key(f"{prefix}/{path.name}"),
                    Config=self.transfer,
                )  # fmt: skip
        shutil.rmtree(directory, ignore_errors=True)

    def put(self, key: str, data: bytes) -> None:
        with _errors(key):
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def fetch(self, key: str, path: Path) -> None:
        with _errors(key):
            self.client.download_file(self.bucket, self._key(key), str(path), Config=self.transfer)

    def read(self, key: str) -> Iterator[bytes]:
        with _errors(key):
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
        try:
            with _errors(key):
                yield from body.iter_chunks(READ_CHUNK)
        finally:
            body.close()

    def exists(self, key: str) -> bool:
        return self.size(key) is not None

    def size(self, key: str) -> int | None:
        try:
            with _errors(key):
                head = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except FileNotFoundError:
            return None
        return int(head["ContentLength"])

    def list(self, prefix: str) -> list[StoredObject]:
        out = []
        with _errors(prefix):
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self._key(prefix)
            )
            for page in pages:
                for item in page.get("Contents", []):
                    key = item["Key"][len(self.prefix) :]
                    out.append(StoredObject(key, int(item["Size"]), item["LastModified"]))
        return out

    def delete(self, key: str) -> None:
        with _errors(key):
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))

    def delete_prefix(self, prefix: str) -> int:
        keys = [obj.key for obj in self.list(prefix)]
        for start in range(0, len(keys), 1000):  # the most one request deletes
            batch = [{"Key": self._key(k)} for k in keys[start : start + 1000]]
            with _errors(prefix):
                self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
                )
        return len(keys)

    def ensure_bucket(self) -> None:
        try:
            with _errors(self.bucket):
                self.client.head_bucket(Bucket=self.bucket)
        except FileNotFoundError:
            with _errors(self.bucket):
                self.client.create_bucket(Bucket=self.bucket)


class _errors:
    """Map boto3's errors: a missing object to FileNotFoundError, a store that cannot be reached
    (or answers 5xx) to StorageUnavailable; anything else passes through."""

    def __init__(self, what: str):
        self.what = what

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None:
            return False
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
            if code in ("404", "NoSuchKey", "NoSuchBucket", "NotFound"):
                raise FileNotFoundError(f"no stored object {self.what!r}") from exc
            if status >= 500 or code in ("SlowDown", "ServiceUnavailable", "RequestTimeout"):
                raise StorageUnavailable(f"object storage error: {code}") from exc
            return False
        if isinstance(exc, BotoCoreError | S3UploadFailedError):
            raise StorageUnavailable(f"object storage unreachable: {exc}") from exc
        return False


def check_storage_url(url: str):
    """`url` parsed, or ValueError saying what is wrong with it (the settings check STORAGE_URL
    with this at start: ``s3://`` without a bucket passed them, and stopped every command)."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"STORAGE_URL: a file URL names no host, got {url!r}")
        if not parsed.path:
            raise ValueError(f"STORAGE_URL: file:///path names a directory, got {url!r}")
        return parsed
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"STORAGE_URL: s3://bucket/prefix names a bucket, got {url!r}")
        return parsed
    raise ValueError(f"STORAGE_URL: expected file:///path or s3://bucket/prefix, got {url!r}")


def open_storage(url: str, timeout_s: float = 30.0) -> Storage:
    """The storage named by `url` (``file:///path`` or ``s3://bucket/prefix``)."""
    parsed = check_storage_url(url)
    if parsed.scheme == "file":
        return FileStorage(Path(unquote(parsed.path)))
    return S3Storage(parsed.netloc, parsed.path, timeout_s, url)


@lru_cache(maxsize=8)
def _cached(url: str, timeout_s: float) -> Storage:
    return open_storage(url, timeout_s)


def get_storage(settings) -> Storage:
    """This process's storage for `settings` (one client per URL, shared by threads)."""
    return _cached(settings.storage, settings.storage_timeout_s)


def dataset_prefix(dataset_id: str) -> str:
    return f"datasets/{dataset_id}"


def prediction_key(run_id: str) -> str:
    return f"predictions/{run_id}.csv"


CHECKPOINTS = "checkpoints/"


def checkpoint_key(job_id: str, attempt: int) -> str:
    """Each attempt stores under its own key: an attempt taken away mid-save (re-queued while
    its worker was cut off) can then only rewrite its own file, never the next attempt's."""
    return f"{CHECKPOINTS}{job_id}.{attempt}.npz"


def job_checkpoints(job_id: str) -> str:
    """The prefix of every checkpoint key of one job (the dot ends the id: no other job's)."""
    return f"{CHECKPOINTS}{job_id}."


def checkpoint_owner(key: str) -> tuple[str, int] | None:
    """(job id, attempt) of a checkpoint's key, None for another key. A key without an attempt
    (``checkpoints/<job>.npz``, stored before keys named it) counts as attempt 0."""
    if not (key.startswith(CHECKPOINTS) and key.endswith(".npz")):
        return None
    job_id, _, attempt = key[len(CHECKPOINTS) : -len(".npz")].partition(".")
    if not job_id or "/" in job_id or not (attempt == "" or attempt.isdecimal()):
        return None
    return job_id, int(attempt or 0)


def copy_between(source: Storage, target: Storage, prefixes: tuple[str, ...], scratch: Path):
    """Copy every object under `prefixes` from `source` to `target` that the target lacks (or
    holds with another size). Yields (key, copied) for each object seen."""
    scratch.mkdir(parents=True, exist_ok=True)
    for prefix in prefixes:
        have = {obj.key: obj.size for obj in target.list(prefix)}
        for obj in source.list(prefix):
            if have.get(obj.key) == obj.size:
                yield obj.key, False
                continue
            local = scratch / f"copy-{os.getpid()}-{os.urandom(4).hex()}"
            try:
                source.fetch(obj.key, local)
                target.store_file(local, obj.key)
            finally:
                local.unlink(missing_ok=True)
            yield obj.key, True

