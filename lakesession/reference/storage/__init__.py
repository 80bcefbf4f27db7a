"""Object storage for the reference catalog: an embedded S3 + STS emulator that
enforces scoped, expiring credentials, and the per-table session policy."""

from .policy import prefixes_session_policy, split_s3_location, table_session_policy

__all__ = [
    "SUPPORTED_MOTO_VERSION",
    "AccessKey",
    "Credentials",
    "S3Emulator",
    "prefixes_session_policy",
    "split_s3_location",
    "table_session_policy",
]


def __getattr__(name: str) -> object:
    # The emulator needs moto (a test/offline extra): import it only when asked for, so
    # `policy` stays importable by the credential vendor without moto installed.
    if name in ("AccessKey", "Credentials", "S3Emulator", "SUPPORTED_MOTO_VERSION"):
        from . import emulator

        return getattr(emulator, name)
    raise AttributeError(name)
