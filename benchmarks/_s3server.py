"""A real S3-speaking server for the tests and the storage benchmark: moto's standalone server
(`moto_server`), on loopback.

Production uses MinIO or any S3 service; moto speaks the same protocol and keeps everything in
memory, so an outage is simulated by stopping the process (SIGSTOP) and resuming it (SIGCONT),
never by restarting it (which would lose every bucket).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from benchmarks._service import free_port

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "margin-test",
    "AWS_SECRET_ACCESS_KEY": "margin-test-secret",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class MotoServer:
    def __init__(self, log_path: Path):
        binary = Path(sys.executable).parent / "moto_server"
        if not binary.exists():
            raise RuntimeError("moto_server not installed: the test extra installs moto[server]")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [str(binary), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **CREDENTIALS},
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = log_path.read_text()
                    raise RuntimeError(f"moto_server did not start:\n{log}") from None
                time.sleep(0.1)

    @property
    def env(self) -> dict[str, str]:
        """What a process needs to reach the server (the usual AWS variables)."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=CREDENTIALS["AWS_REGION"],
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def new_bucket(self) -> str:
        name = f"margin-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix
        )
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def pause(self) -> None:
        """The server stops answering (connections are accepted by the kernel, never served)."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
