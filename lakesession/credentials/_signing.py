"""Remote signing on the client: an s3fs filesystem whose every S3 request the catalog signs.

``SigningFileIO`` (a pyiceberg ``FsspecFileIO``) holds no storage credential. Each S3
request is signed by the catalog's signer endpoint (pyiceberg's ``S3V4RestSigner``
protocol), which authorizes it for the caller's token, table and path.

Performance — what made a signed scan 2-3x slower than a vended one was never the
signatures (one ~5 ms call per S3 request, as many requests as a vended scan) but
building clients on the scan's critical path:

* pyiceberg's ``FsspecFileIO.get_fs`` caches filesystems *per thread*, and a scan plans
  and reads from a pool of threads. With vended keys that is harmless (fsspec's instance
  cache hands each thread a filesystem built once per process), but a signing filesystem
  must skip that cache (two tables would share one signer), so every thread of every scan
  built its own ``S3FileSystem``. ``SigningFileIO`` keeps one per FileIO, shared by all
  threads (s3fs runs every call on its single event-loop thread), built once under a lock.
* each of those built a new aiobotocore session (re-parsing botocore's S3 model and
  endpoint rules), a new TLS context (loading the CA bundle) and a new signer HTTP client
  (another TLS context): now one session, one TLS context per ``verify`` setting and one
  signer client per event loop serve the whole process. None of them holds a credential:
  requests are ``UNSIGNED`` until the catalog signs them, and every signing call carries
  its own caller's token.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pyiceberg.catalog.rest.auth import AUTH_MANAGER
from pyiceberg.io import (
    AWS_REGION,
    S3_ENDPOINT,
    S3_FORCE_VIRTUAL_ADDRESSING,
    S3_REGION,
    S3_SIGNER,
    S3_SIGNER_URI,
)
from pyiceberg.io.fsspec import FsspecFileIO
from pyiceberg.typedef import Properties
from typing_extensions import override

if TYPE_CHECKING:
    from aiobotocore.session import AioSession

S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
SIGNED_BLOCK_SIZE = 32 * 1024 * 1024
SIGNER_EVENT_ID = 1925  # pyiceberg's unique_id for its before-sign.s3 hook: replace it, never run both


_session_lock = threading.Lock()
_session: AioSession | None = None


def _shared_session() -> AioSession:
    """One aiobotocore session for every signing filesystem of the process.

    A session holds no credential here (clients are ``UNSIGNED``: the catalog signs), only botocore's
    loaders, whose caches keep the parsed S3 service model and endpoint rules: a fresh session per
    filesystem re-parses them for every table load (~0.1 s of CPU, several times that on a busy host).
    """
    global _session
    with _session_lock:
        if _session is None:
            from aiobotocore.session import AioSession

            _session = AioSession()
        return _session


@lru_cache(maxsize=8)
def _verify_contexts(http_session_cls: type, verify: Any) -> Any:
    return http_session_cls(verify=verify)._build_ssl_contexts(None)


@lru_cache(maxsize=1)
def _http_session_cls() -> type:
    """aiobotocore's aiohttp session, building its TLS context once per process instead of per client.

    aiobotocore loads the CA bundle into a new ``SSLContext`` for every client (tens of milliseconds,
    on the first request's critical path). The context is only read once built, so one per ``verify``
    setting is shared; a client certificate or a proxy keeps aiobotocore's own per-client path.
    """
    from aiobotocore.httpsession import AIOHTTPSession

    class SharedTLSSession(AIOHTTPSession):  # type: ignore[misc,unused-ignore]  # untyped without aiobotocore stubs
        @override
        def _build_ssl_contexts(self, proxy_url: str | None) -> Any:
            if proxy_url or getattr(self, "_cert_file", None):
                return super()._build_ssl_contexts(proxy_url)
            return _verify_contexts(AIOHTTPSession, self._verify)

    return SharedTLSSession


def signing_s3(properties: Properties) -> Any:
    """An s3fs filesystem whose every request is signed by the catalog (no credentials on the client)."""
    from botocore import UNSIGNED
    from s3fs import S3FileSystem

    config_kwargs: dict[str, Any] = {"signature_version": UNSIGNED, "http_session_cls": _http_session_cls()}
    if str(properties.get("s3.path-style-access", "")).lower() == "true":
        config_kwargs["s3"] = {"addressing_style": "path"}
    elif str(properties.get(S3_FORCE_VIRTUAL_ADDRESSING, "")).lower() == "true":
        config_kwargs["s3"] = {"addressing_style": "virtual"}
    client_kwargs = {
        "endpoint_url": properties.get(S3_ENDPOINT),
        "region_name": properties.get(S3_REGION) or properties.get(AWS_REGION),
    }
    # every request costs a round trip to the catalog's signer: read in larger blocks than s3fs's 5 MB
    # default so that streamed reads need fewer signatures (each block is one signed ranged GET)
    block = int(properties.get("s3.signer.block-size-bytes", SIGNED_BLOCK_SIZE))
    # skip_instance_cache: fsspec would hand two tables the same filesystem (same kwargs), and the last
    # table's signer would sign for both
    fs = S3FileSystem(
        anon=False,
        client_kwargs=client_kwargs,
        config_kwargs=config_kwargs,
        skip_instance_cache=True,
        default_block_size=block,
        session=_shared_session(),
    )
    signer = AsyncRestSigner(properties)
    fs.s3.meta.events.unregister("before-sign.s3", unique_id=SIGNER_EVENT_ID)
    fs.s3.meta.events.register_last("before-sign.s3", signer, unique_id=SIGNER_EVENT_ID)
    return fs


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
_clients_lock = threading.Lock()


def _signer_client() -> Any:
    """The signer's keep-alive HTTP client for the running event loop, shared by every signer on it.

    s3fs runs all its calls on one event loop thread, so this is one client (one TLS context, one
    connection pool to the catalog) for the process, instead of one per table load. It carries no
    credential: each signing request sends its own caller's ``Authorization``.
    """
    import httpx

    loop = asyncio.get_running_loop()
    with _clients_lock:
        client = _clients.get(loop)
        if client is None:
            client = _clients[loop] = httpx.AsyncClient(timeout=60)
    return client


class AsyncRestSigner:
    """pyiceberg's ``S3V4RestSigner`` protocol, without blocking s3fs's event loop.

    pyiceberg's signer posts to the catalog with synchronous ``requests`` from inside
    aiobotocore's event hook, which stalls every concurrent download while a request is
    being signed. aiobotocore awaits coroutine hooks, so this signer awaits an async
    HTTP call instead and the other range reads keep streaming.
    """

    def __init__(self, properties: Properties):
        self.properties = properties

    def _url(self) -> str:
        base = str(self.properties.get(S3_SIGNER_URI) or self.properties.get("uri") or "").rstrip("/")
        endpoint = self.properties.get("s3.signer.endpoint", "v1/aws/s3/sign").strip()
        return f"{base}/{endpoint}"

    def _headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        manager = self.properties.get(AUTH_MANAGER)
        auth = (
            manager.auth_header()
            if manager is not None
            else (f"Bearer {self.properties['token']}" if self.properties.get("token") else None)
        )
        if auth:
            headers["Authorization"] = auth
        return headers

    async def __call__(self, request: Any, **_: Any) -> None:
        from pyiceberg.io.fsspec import SignError

        body = {
            "method": request.method,
            "region": request.context["client_region"],
            "uri": request.url,
            "headers": {key: [val] for key, val in request.headers.items()},
        }
        response = await _signer_client().post(self._url(), headers=self._headers(), json=body)
        if response.status_code != 200:
            raise SignError(f"Failed to sign request {response.status_code}: {request.method} {request.url}")
        signed = response.json()
        for key, value in signed["headers"].items():
            # replace, never append: the catalog echoes the request's own headers (Range, Host, …) and a
            # duplicated Range makes the store ignore it and send the whole object (pyiceberg appends)
            if key in request.headers:
                del request.headers[key]
            request.headers[key] = ", ".join(value)
        request.url = signed["uri"]

    def __repr__(self) -> str:
        return f"AsyncRestSigner(url={self._url()!r})"


class SigningFileIO(FsspecFileIO):
    """An ``FsspecFileIO`` for remote signing: no credentials, the catalog signs every S3 request.

    ``properties`` need ``s3.signer.uri``/``s3.signer.endpoint`` and pyiceberg's ``AUTH_MANAGER``
    (an object whose ``auth_header()`` yields the user's current token, asked on every request).
    One signing filesystem per FileIO, shared by every thread (see the module docstring).
    """

    def __init__(self, properties: Properties):
        super().__init__({**properties, S3_SIGNER: "S3V4RestSigner"})
        for scheme in S3_SCHEMES:
            self._scheme_to_fs[scheme] = signing_s3
        self._shared_lock = threading.Lock()
        self._shared_s3: Any = None

    @override
    def get_fs(self, scheme: str, hostname: str | None = None) -> Any:
        if scheme not in S3_SCHEMES:
            return super().get_fs(scheme, hostname)
        fs = self._shared_s3
        if fs is None:
            with self._shared_lock:
                if self._shared_s3 is None:
                    self._shared_s3 = signing_s3(self.properties)
                fs = self._shared_s3
        return fs

    @override
    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_shared_lock", None)
        state["_shared_s3"] = None  # a filesystem (event loop, sockets) does not travel: rebuilt on first use
        return state

    @override
    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._shared_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SigningFileIO(signer={self.properties.get(S3_SIGNER_URI)!r})"
