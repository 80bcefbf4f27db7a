"""The config files a session's settings may come from (``lakesession._settings`` merges them last).

The config file is ``$LAKESESSION_CONFIG`` or ``~/.config/lakesession/config.yaml``; catalogs
defined in pyiceberg's ``~/.pyiceberg.yaml`` (or ``$PYICEBERG_HOME/.pyiceberg.yaml``) are
usable by name too, so ``lakesession.connect("prod")`` finds what ``load_catalog("prod")`` does.

```yaml
# ~/.config/lakesession/config.yaml
default: prod
catalogs:
  prod:
    uri: https://catalog.example.com
    warehouse: analytics
    issuer: https://idp.example.com/realms/data     # OIDC discovery; device login when no secret
    client_id: lakesession
```
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError

__all__ = ["catalog_options", "config_file", "pyiceberg_file"]

# pyiceberg catalog keys -> our option names
PYICEBERG_KEYS = {
    "uri": "uri",
    "warehouse": "warehouse",
    "token": "token",
    "credential": "credential",
    "oauth2-server-uri": "token_url",
    "scope": "scope",
}


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read {path}: {type(e).__name__}; fix or remove the file") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping; see the README's configuration section")
    return data


def config_file() -> Path:
    return Path(os.environ.get("LAKESESSION_CONFIG") or Path.home() / ".config" / "lakesession" / "config.yaml")


def pyiceberg_file() -> Path:
    return Path(os.environ.get("PYICEBERG_HOME") or Path.home()) / ".pyiceberg.yaml"


def catalog_options(name: str | None) -> dict[str, Any]:
    """Options of catalog ``name`` (or the default one) from the config file, then ~/.pyiceberg.yaml."""
    ours = _read_yaml(config_file()) if config_file().exists() else {}
    name = name or ours.get("default")
    if name is None:
        return {}
    if name in (ours.get("catalogs") or {}):
        return dict(ours["catalogs"][name])
    theirs = _read_yaml(pyiceberg_file()) if pyiceberg_file().exists() else {}
    entry = (theirs.get("catalog") or {}).get(name)
    if entry is not None:
        return {ours_key: entry[key] for key, ours_key in PYICEBERG_KEYS.items() if key in entry}
    raise ConfigError(
        f"no catalog named {name!r} in {config_file()} or {pyiceberg_file()}; define it there or pass uri=..."
    )
