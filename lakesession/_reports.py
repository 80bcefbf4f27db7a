"""What a session did and may do, as tables: grants, audit, credentials, accesses, status.

Kept apart from ``Session`` (lifecycle, Spark, pyiceberg) so the notebook views, widgets and the
JupyterLab panel read one small, secret-free surface. Everything here is read-only: no report
starts a gateway, Spark, or an embedded catalog.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from .errors import CatalogAccessError

if TYPE_CHECKING:
    import pandas as pd

    from .credentials import CredentialStore
    from .gateway import AccessLog
    from .identity import TokenSource

GRANTS_COLUMNS = ["securable", "privileges", "granted", "roles"]
AUDIT_COLUMNS = ["time", "action", "object", "via_chain", "ran_on", "decision", "credentials_expire_at"]
CREDENTIAL_COLUMNS = [
    "engine",
    "table",
    "prefix",
    "mode",
    "state",
    "expires_at",
    "seconds_left",
    "last_refresh",
    "refreshes",
    "last_error",
]
ACCESS_COLUMNS = [
    "time",
    "action",
    "object",
    "status",
    "duration_ms",
    "request_id",
    "credentials_expire_at",
    "via",
    "chain",
    "count",
]
# answers meaning "this catalog has no grants endpoint" (it is not part of the Iceberg spec). 400 too: the request
# is a bare GET, so a "bad request" can only be about the path (Apache's REST fixture: "No route for request")
NO_GRANTS_ENDPOINT = (400, 404, 405, 501)


class ReportSource(Protocol):
    """What the reports read of a session (``lakesession.Session`` is one)."""

    catalog_name: str
    access_log: AccessLog
    credential_store: CredentialStore

    @property
    def uri(self) -> str: ...
    @property
    def identity(self) -> TokenSource: ...
    @property
    def starting(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def spark_started(self) -> bool: ...
    def _token(self) -> str: ...


class Reports:
    """The pandas (and plain-dict) reports of one ``Session``; reach them as ``session.reports``."""

    def __init__(self, session: ReportSource):
        self._session = session

    def grants(self, *, timeout: float = 30.0, strict: bool = False) -> pd.DataFrame:
        """The user's effective privileges per securable, from the catalog's grants endpoint.

        A catalog without one (400/404/405/501: the endpoint is not part of the Iceberg spec) gives a single
        row saying "unknown" — never invented grants — or, with ``strict=True``, a ``CapabilityError`` naming
        the catalog's ``/v1/config`` answer. Any other failure is raised, not hidden:
        ``CatalogAccessError`` for 401/403/5xx and timeouts (an expired or revoked login shows here).
        """
        import httpx
        import pandas as pd

        s = self._session
        url = f"{s.uri}/management/v1/me/grants"
        try:
            token = s._token()
            r = httpx.get(url, headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=timeout)
        except httpx.HTTPError as exc:
            raise CatalogAccessError(
                f"The catalog's grants endpoint did not answer ({type(exc).__name__}). "
                "Retry; if it persists, check the catalog URI and ask the catalog's operator.",
                "catalog unavailable",
            ) from None
        if r.status_code in NO_GRANTS_ENDPOINT:
            if strict:
                from .catalog._capabilities import grants_unavailable

                raise grants_unavailable(getattr(s, "catalog", None), s.uri, r.status_code)
            return pd.DataFrame([dict.fromkeys(GRANTS_COLUMNS, "unknown")], columns=GRANTS_COLUMNS)
        if r.status_code != 200:
            raise _grants_error(r.status_code, _error_message(r))
        try:
            rows = [
                {
                    "securable": g["securable"],
                    "privileges": ", ".join(g["privileges"]),
                    "granted": ", ".join(g["granted"]),
                    "roles": ", ".join(g["roles"]),
                }
                for g in r.json()["grants"]
            ]
        except (ValueError, KeyError, TypeError):
            raise CatalogAccessError(
                "The catalog's grants endpoint answered something that is not a grants list. "
                "Ask the catalog's operator (or check that the URI names an Iceberg REST catalog).",
                "catalog error",
                status=r.status_code,
            ) from None
        return pd.DataFrame(rows, columns=GRANTS_COLUMNS)

    def audit(self) -> pd.DataFrame:
        """What this session accessed: time, action, object, via-chain, where it ran (``engine``: the platform's
        trusted engine), decision, credential expiry."""
        import pandas as pd

        rows = [
            {
                "time": r.time,
                "action": r.action,
                "object": r.object,
                "via_chain": r.chain or "",
                "ran_on": "engine" if r.via == "engine" else "here",  # the trusted engine ran it (Session.sql)
                "decision": "allow" if r.status < 400 else ("deny" if r.status in (401, 403) else f"error {r.status}"),
                "credentials_expire_at": r.credentials_expire_at,
            }
            for r in self._session.access_log.records()
        ]
        df = pd.DataFrame(rows, columns=AUDIT_COLUMNS)
        df["time"] = pd.to_datetime(df["time"], unit="s", utc=True)
        df["credentials_expire_at"] = pd.to_datetime(df["credentials_expire_at"], unit="s", utc=True)
        return df

    def credentials(self) -> pd.DataFrame:
        """Per-table credential state: tables read from Python (``engine="python"``: the credential
        store) and tables Spark loaded through the gateway (``engine="spark"``: vended expiries seen
        in its loads and refreshes)."""
        import pandas as pd

        return pd.DataFrame(self.credential_rows(), columns=CREDENTIAL_COLUMNS)

    def credential_rows(self) -> list[dict[str, Any]]:
        """The rows of ``credentials()`` as plain dicts (no pandas: the kernel publisher calls this often)."""
        s = self._session
        rows = [{"engine": "python", **r} for r in s.credential_store.snapshot()]
        now = time.time()
        spark: dict[str, dict[str, Any]] = {}
        for r in s.access_log.records():
            if r.action not in ("load_table", "create_table", "refresh_credentials"):
                continue
            if not r.object.startswith("table "):
                continue
            table = r.object[6:]
            if r.status == 404 and table not in spark:
                continue  # nothing was loaded: Iceberg Java probes `ns.t` as a namespace before each metadata table
            row = spark.setdefault(
                table,
                {**dict.fromkeys(CREDENTIAL_COLUMNS), "engine": "spark", "table": table, "state": "unknown"},
            )
            row["refreshes"] = row["refreshes"] or 0
            if r.action == "refresh_credentials":
                row["refreshes"] += r.count  # cache-served refreshes come aggregated per minute
                row["last_refresh"] = r.last
            if r.status in (401, 403):
                row["state"], row["last_error"] = "revoked", f"catalog answered {r.status}"
            elif r.status == 200 and r.credentials_expire_at:
                row["expires_at"] = r.credentials_expire_at
                row["state"], row["last_error"] = ("valid" if r.credentials_expire_at > now else "expired"), None
        signing = getattr(s, "access", None) == "remote-signing"
        for row in spark.values():
            if signing and row["state"] == "unknown":
                row["state"] = "remote-signing"  # no credential to expire: the catalog signs each request
            if row["expires_at"]:
                row["seconds_left"] = max(0.0, round(row["expires_at"] - now, 1))
                if row["state"] == "valid" and row["expires_at"] <= now:
                    row["state"] = "expired"
            rows.append(row)
        return rows

    def status(self) -> dict[str, Any]:
        """A secret-free, JSON-ready snapshot for widgets and the JupyterLab panel: who, where, and
        each table's credential state. Does not start anything (an embedded catalog still starting
        reports ``state="starting"``)."""
        s = self._session
        if s.starting:
            return {
                "state": "starting",
                "catalog_name": s.catalog_name,
                "uri": None,
                "identity": None,
                "credentials": [],
                "time": time.time(),
            }
        identity = s.identity
        return {
            "state": "closed" if s.closed else "ready",
            "catalog_name": s.catalog_name,
            "uri": s.uri,
            "identity": identity.describe() if identity is not None else None,
            "spark": s.spark_started,
            "access": getattr(s, "access", "vended-credentials"),
            "credentials": self.credential_rows(),
            "time": time.time(),
        }

    def accesses(self) -> pd.DataFrame:
        """What the Spark engine loaded, created, committed and dropped through the gateway."""
        import pandas as pd

        df = pd.DataFrame([r.as_dict() for r in self._session.access_log.records()], columns=ACCESS_COLUMNS)
        df["time"] = pd.to_datetime(df["time"], unit="s", utc=True)
        return df


def _error_message(r: Any) -> str:
    """The catalog's own message from an Iceberg ``ErrorModel`` body (else the reason phrase)."""
    try:
        body = r.json()
        return str(body["error"]["message"])[:300]
    except (ValueError, KeyError, TypeError):
        return str(getattr(r, "reason_phrase", "") or "")


def _grants_error(status: int, message: str) -> CatalogAccessError:
    if status == 401:
        kind, fix = "not authorized", "log in again (lakesession login / %lakesession login)"
    elif status == 403:
        kind, fix = "forbidden", "ask the catalog's administrator for access to your grants"
    elif status >= 500:
        kind, fix = "catalog failure", "retry; if it persists, ask the catalog's operator"
    else:
        kind, fix = "catalog error", "ask the catalog's operator"
    detail = f": {message}" if message else ""
    return CatalogAccessError(
        f"The catalog answered {status} to the grants request{detail}. Fix: {fix}.", kind, status=status
    )
