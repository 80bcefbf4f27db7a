"""Write-through persistence of the S3 emulator's objects (``serve --s3-emulator`` restarts lose nothing)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any


class ObjectDir:
    """Write-through copy of the emulator's objects in a directory, so a restarted emulator keeps them.

    One directory per bucket; each object is a file named by the SHA-256 of its key (keys may hold
    anything, including ``..`` and names that are also prefixes) beside a JSON sidecar with the key.
    Written after every successful mutating request, so even a killed process loses nothing acknowledged.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def _paths(self, bucket: str, key: str) -> tuple[Path, Path]:
        digest = hashlib.sha256(key.encode()).hexdigest()
        d = self.root / bucket
        return d / digest, d / f"{digest}.json"

    def add_bucket(self, bucket: str) -> None:
        (self.root / bucket).mkdir(exist_ok=True)

    def drop_bucket(self, backend: Any, bucket: str) -> None:
        """Forget a bucket the backend no longer has (DeleteBucket succeeds only on an empty bucket)."""
        if bucket not in backend.buckets:
            with self._lock:
                shutil.rmtree(self.root / bucket, ignore_errors=True)

    def sync_key(self, backend: Any, bucket: str, key: str) -> None:
        """Mirror one key: write it if the backend has it, remove it if not."""
        data_path, meta_path = self._paths(bucket, key)
        b = backend.buckets.get(bucket)
        obj = b.keys.get(key) if b is not None else None
        with self._lock:
            if obj is None or getattr(obj, "value", None) is None:
                data_path.unlink(missing_ok=True)
                meta_path.unlink(missing_ok=True)
                return
            data_path.parent.mkdir(exist_ok=True)
            _atomic_write(data_path, obj.value)
            _atomic_write(meta_path, json.dumps({"key": key}).encode())

    def sync_bucket(self, backend: Any, bucket: str) -> None:
        """After a multi-key request (DeleteObjects): drop files whose key the backend no longer has."""
        d = self.root / bucket
        b = backend.buckets.get(bucket)
        if not d.is_dir():
            return
        for meta in d.glob("*.json"):
            key = json.loads(meta.read_text())["key"]
            if b is None or b.keys.get(key) is None:
                self.sync_key(backend, bucket, key)

    def restore(self, emulator: Any) -> int:
        """Put every stored object back into a freshly started emulator; returns how many."""
        count = 0
        for d in sorted(p for p in self.root.iterdir() if p.is_dir()):
            emulator.create_bucket(d.name)
            s3 = emulator._s3()
            for meta in d.glob("*.json"):
                data = meta.with_suffix("")
                if data.exists():
                    s3.put_object(d.name, json.loads(meta.read_text())["key"], data.read_bytes())
                    count += 1
        return count


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
