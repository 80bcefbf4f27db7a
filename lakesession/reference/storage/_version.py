"""The one moto version the emulator's hooks are written for; checked without importing moto (fast)."""

from __future__ import annotations

SUPPORTED_MOTO_VERSION = "5.2.1"


def check_moto_version(found: str | None = None) -> None:
    """Raise ``RuntimeError`` unless moto is exactly the version the hooks were written for."""
    if found is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("moto")
        except PackageNotFoundError:
            found = "(not installed)"
    if found != SUPPORTED_MOTO_VERSION:
        raise RuntimeError(
            f"lakesession's S3 emulator patches moto internals and supports moto=={SUPPORTED_MOTO_VERSION} "
            f"only; found moto {found}. Install moto[server]=={SUPPORTED_MOTO_VERSION}."
        )
