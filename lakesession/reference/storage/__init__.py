"""Object storage for the reference catalog: an embedded S3 + STS emulator that
enforces scoped, expiring credentials, and the per-table session policy."""

from .policy import split_s3_location, table_session_policy

__all__ = ["Credentials", "S3Emulator", "SUPPORTED_MOTO_VERSION", "split_s3_location", "table_session_policy"]


def __getattr__(name: str):  # the emulator imports moto: load it only when asked for
    if name in ("Credentials", "S3Emulator", "SUPPORTED_MOTO_VERSION"):
        from . import emulator

        return getattr(emulator, name)
    raise AttributeError(name)
