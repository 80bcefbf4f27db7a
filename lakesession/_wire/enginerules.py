"""The trusted engine's rulebook (``engine_rules.json``): one copy of every rule both of its layers enforce.

The front door (``lakesession.engine._sandbox``) reads it here; ``java/build.py`` puts the same file into
the engine's ``lakesession-engine.jar`` as ``dev/lakesession/engine/rules.json`` for the JVM's checks
(``dev.lakesession.engine.Rulebook``); ``docs/_gen.py`` renders its rule table. Tests prove the three
copies equal. It also holds the contract the client, the engine and the JVM share: the view-chain
catalogs' names, the refusal's error class and text, and the signature trailer of expanded SQL.
Here, not in ``engine/``: the client half (view expansion in a notebook, error mapping) needs it too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

__all__ = [
    "BOOK",
    "CHAIN_SUFFIX",
    "ERROR_CLASS",
    "PATH",
    "REFUSED_CLASS",
    "REFUSED_PREFIX",
    "SESSION_USER_CONF",
    "SIGNATURE",
    "SQL_STATE",
    "chain_prefix",
    "signature_trailer",
]

PATH = Path(__file__).with_name("engine_rules.json")
BOOK: dict[str, Any] = json.loads(PATH.read_text(encoding="utf-8"))

CHAIN_SUFFIX: str = BOOK["chain_catalog_suffix"]
ERROR_CLASS: str = BOOK["refusal"]["error_class"]
SQL_STATE: str = BOOK["refusal"]["sql_state"]
REFUSED_CLASS: str = BOOK["refusal"]["java_class"]
REFUSED_PREFIX: str = BOOK["refusal"]["prefix"]
SESSION_USER_CONF: str = BOOK["session_user_conf"]
#: the trailer the front door appends to SQL it expanded, and the JVM verifies
SIGNATURE: re.Pattern[str] = re.compile(BOOK["signature"]["pattern"])


def chain_prefix(catalog_name: str) -> str:
    """The name prefix of ``catalog_name``'s view-chain catalogs (``<catalog>__chain_``), as Spark compares it."""
    return f"{catalog_name}{CHAIN_SUFFIX}"


def signature_trailer(mac_hex: str) -> str:
    """The comment that carries a signature at the end of a signed SQL text."""
    return str(BOOK["signature"]["trailer"]).replace("{mac}", mac_hex)
