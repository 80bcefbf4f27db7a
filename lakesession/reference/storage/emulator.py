"""An embedded S3 + STS emulator (moto 5.2.1 server) that enforces what AWS enforces.

Every request must be SigV4-signed by credentials known to this emulator;
STS ``AssumeRole`` credentials are limited to the intersection of the role's
policies and the session policy, and expire (``ExpiredToken``) after
``DurationSeconds``. See :mod:`._enforce` for the moto internals patched.

Differences from AWS, on purpose: ``DurationSeconds`` may be as short as
``min_duration_seconds`` (default 1 s; AWS: 900 s) so tests can watch
credentials expire; presigned URLs (query-string auth) are not accepted;
bucket policies, ACL grants, permissions boundaries and policy variables are
not evaluated; DeleteObjects is all-or-nothing (one denied key denies all).

Isolation: moto keeps state in process-global backends. Each emulator gets its
own AWS account id, so IAM users, roles, STS sessions and buckets are
separate, and keys or buckets of another emulator (or of an in-process
``moto.mock_aws``) are rejected (``InvalidAccessKeyId`` / ``AccessDenied``).
Bucket *names* are global, as in AWS: two emulators in one process cannot both
own bucket ``warehouse``. moto's global reset (``mock_aws`` start and stop,
``moto.core.models.BackendDict.reset``) wipes every emulator's state;
``/moto-api`` is not served.
"""

from __future__ import annotations

import json
import re
import secrets
import string
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from ._persist import ObjectDir
from ._version import SUPPORTED_MOTO_VERSION, check_moto_version

if TYPE_CHECKING:
    from ._enforce import Realm

__all__ = ["SUPPORTED_MOTO_VERSION", "AccessKey", "Credentials", "S3Emulator", "StoreRequest", "check_moto_version"]

ADMIN_USER = "lakesession-admin"
VENDING_ROLE = "lakesession-vending"
_DEFAULT_ACCOUNT = "123456789012"


class AccessKey(NamedTuple):
    """An IAM user's long-lived key pair: ``ak, sk = emu.admin_credentials``."""

    access_key_id: str
    secret_access_key: str


class Credentials(NamedTuple):
    """STS temporary credentials (or any key pair, with ``session_token=None``)."""

    access_key_id: str
    secret_access_key: str
    session_token: str | None = None


class StoreRequest(NamedTuple):
    """One request the emulator received (``S3Emulator.requests``): which key signed it, what it asked, from where.

    Tests use it to say who used a credential: ``peer`` is the client's socket (address, port), still
    open while ``S3Emulator.on_request`` runs, so a test can tell which local process sent it.
    """

    time: float
    access_key_id: str  # from the SigV4 Authorization header; "" when unsigned
    method: str
    path: str
    peer: tuple[str, int]


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


def _enforce() -> Any:
    """The moto hooks module (importing it imports moto: ~0.2 CPU-s, so only when moto is needed)."""
    from . import _enforce as module

    return module


_dispatcher_lock = threading.Lock()
_dispatcher: Any = None


def _moto_app() -> Any:
    """One moto dispatcher per process (its per-service Flask apps are stateless)."""
    global _dispatcher
    with _dispatcher_lock:
        if _dispatcher is None:
            from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

            _dispatcher = DomainDispatcherApplication(create_backend_app)
        return _dispatcher


_SIGV4 = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=[A-Za-z0-9]+/\d{8}/[^/,\s]+/[^/,\s]+/aws4_request,\s*"
    r"SignedHeaders=[a-z0-9;-]+,\s*Signature=[0-9a-f]{64}$"
)


def _error(start_response: Any, code: str, message: str) -> list[bytes]:
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>'
    ).encode()
    start_response("400 Bad Request", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
    return [body]


_MUTATING = frozenset({"PUT", "POST", "DELETE"})


class _RealmApp:
    """WSGI wrapper: binds the emulator's realm for the request; hides /moto-api; mirrors writes to disk."""

    def __init__(
        self,
        realm: Realm,
        app: Any,
        objects: ObjectDir | None = None,
        backend: Any = None,
        record: Callable[[dict[str, Any]], None] | None = None,
    ):
        self.realm, self.app = realm, app
        self.objects, self.backend = objects, backend
        self.record = record
        self._current_realm = _enforce().CURRENT_REALM

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO", "").startswith("/moto-api"):
            start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "9")])
            return [b"Not Found"]
        if not environ.get("HTTP_HOST"):  # an HTTP/1.0 request without Host: moto would answer 500
            body = b"<Error><Code>InvalidRequest</Code><Message>Missing Host header</Message></Error>"
            start_response("400 Bad Request", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
            return [body]
        if self.record is not None:
            self.record(environ)
        auth = environ.get("HTTP_AUTHORIZATION")
        if auth is not None and not _SIGV4.match(auth):  # moto answers 500 to some of these
            if auth.startswith("AWS4-HMAC-SHA256"):
                return _error(start_response, "AuthorizationHeaderMalformed", "The authorization header is malformed.")
            return _error(
                start_response,
                "InvalidRequest",
                "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.",
            )
        token = self._current_realm.set(self.realm)
        status: list[str] = []

        def capture(code: str, headers: Any, *exc: Any) -> Any:
            status.append(code)
            return start_response(code, headers, *exc)

        try:
            result = self.app(environ, capture if self.objects is not None else start_response)
        finally:
            self._current_realm.reset(token)
        if self.objects is not None and status and status[0][:1] == "2":
            self._mirror(environ)
        return result

    def _mirror(self, environ: dict[str, Any]) -> None:
        """moto has already applied the request (synchronously): copy what it changed to disk."""
        if environ.get("REQUEST_METHOD") not in _MUTATING or self.objects is None:
            return
        path = environ.get("PATH_INFO", "")
        bucket, _, key = path.lstrip("/").partition("/")
        if not bucket:
            return  # STS / IAM
        if key:
            self.objects.sync_key(self.backend(), bucket, key)  # PATH_INFO is already decoded
        elif environ["REQUEST_METHOD"] == "POST":  # DeleteObjects
            self.objects.sync_bucket(self.backend(), bucket)
        elif environ["REQUEST_METHOD"] == "PUT":  # CreateBucket (or a bucket setting: harmless)
            self.objects.add_bucket(bucket)
        else:  # DeleteBucket
            self.objects.drop_bucket(self.backend(), bucket)


class _OnFirstRequest:
    """WSGI: builds the real app (moto, the account) at the first request (a lazily started emulator)."""

    def __init__(self, build: Any):
        self._build, self._app = build, cast(Any, None)
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if self._app is None:
            with self._lock:
                if self._app is None:
                    self._app = self._build()
        return self._app(environ, start_response)


def _policy_json(policy: dict[str, Any] | str) -> str:
    return policy if isinstance(policy, str) else json.dumps(policy)


class S3Emulator:
    """moto's S3 + STS (+ IAM) on ``127.0.0.1`` in a background thread, with enforcement.

    Example::

        with S3Emulator() as emu:
            emu.create_bucket("warehouse")
            s3 = emu.client("s3")                    # admin credentials
            creds = emu.assume(table_session_policy("s3://warehouse/wh/orders", write=False))
            scoped = emu.client("s3", creds)         # limited to wh/orders/

    Args:
        region: the region clients sign for (``.region``).
        account_id: 12-digit account; default: a fresh random one per emulator.
        host / port: bind address; port 0 picks a free port.
        min_duration_seconds: shortest ``DurationSeconds`` AssumeRole accepts
            (AWS: 900; default here 1, for expiry tests).
        persist_dir: keep objects (and buckets) in this directory, written through on every change and
            put back on ``start()``: a restarted emulator serves what the old one held. IAM users, roles and
            STS sessions are not kept (a restart issues new admin keys; vended credentials end with it).
        lazy: ``start()`` only listens, with admin keys and the vending role ARN chosen up front; moto is
            imported and the account set up at the first request or call that needs it (the embedded
            catalog: its start competes with a launching JVM for CPU, and may never touch storage).
        request_log: how many of the latest requests ``requests`` keeps (``StoreRequest``: key id, method,
            path, peer); ``on_request``, if set, is called with each one on its serving thread, before it is
            served (tests: which process used a vended key).
    """

    def __init__(
        self,
        region: str = "us-east-1",
        *,
        account_id: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        min_duration_seconds: int = 1,
        persist_dir: str | Path | None = None,
        lazy: bool = False,
        request_log: int = 10_000,
    ):
        check_moto_version()
        self.requests: deque[StoreRequest] = deque(maxlen=request_log)
        self.on_request: Callable[[StoreRequest], None] | None = None
        self._objects = ObjectDir(persist_dir) if persist_dir is not None else None
        self.region = region
        # a fresh account is checked against moto's when moto is loaded: now, or (lazy) at first use
        self._unchecked_account = account_id is None and "moto.iam.models" not in sys.modules
        self.account_id = account_id or self._fresh_account_id()
        self._host, self._port = host, port
        self._min_duration_seconds = min_duration_seconds
        self._lazy = lazy
        self._realm_: Realm | None = None
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._admin: AccessKey | None = None
        self._vending_role_arn: str | None = None
        self._bootstrapped = False
        self._pending_buckets: list[str] = []
        self._moto_lock = threading.RLock()

    @staticmethod
    def _fresh_account_id() -> str:
        loaded = sys.modules.get("moto.iam.models")  # moto not imported yet: no account can exist
        taken: Any = loaded.iam_backends if loaded is not None else ()
        while True:
            candidate = str(secrets.randbelow(9 * 10**11) + 10**11)
            if candidate != _DEFAULT_ACCOUNT and candidate not in taken:
                return candidate

    @property
    def _realm(self) -> Realm:
        if self._realm_ is None:
            self._realm_ = _enforce().Realm(self.account_id, min_duration_seconds=self._min_duration_seconds)
        return self._realm_

    def _ensure_moto(self) -> None:
        """Patch moto and set the account up (admin user and keys, vending role, buckets), once."""
        with self._moto_lock:
            if self._bootstrapped:
                return
            enforce = _enforce()
            enforce.install()
            if self._unchecked_account and self.account_id in enforce.iam_backends:
                raise RuntimeError(f"account {self.account_id} is already in use by moto in this process")
            self._unchecked_account = False
            self._bootstrap(preset=self._admin)  # a lazy start promised these keys
            self._bootstrapped = True
            if self._objects is not None:
                self._objects.restore(self)
            pending, self._pending_buckets = self._pending_buckets, []
            for name in pending:
                self.create_bucket(name)

    def warm(self) -> None:
        """A lazy emulator: import moto and set the account up now rather than at the first request."""
        self._ensure_moto()
        _moto_app()

    def _wsgi_app(self) -> Any:
        self._ensure_moto()
        return _RealmApp(self._realm, _moto_app(), self._objects, self._s3, self._record)

    def _record(self, environ: dict[str, Any]) -> None:
        auth = environ.get("HTTP_AUTHORIZATION") or ""
        request = StoreRequest(
            time.time(),
            auth.partition("Credential=")[2].partition("/")[0],
            environ.get("REQUEST_METHOD", ""),
            environ.get("PATH_INFO", ""),
            (environ.get("REMOTE_ADDR", ""), int(environ.get("REMOTE_PORT") or 0)),
        )
        self.requests.append(request)
        observer = self.on_request
        if observer is not None:
            observer(request)

    # --- lifecycle

    def start(self) -> S3Emulator:
        """Bootstrap the account (once) and serve on a free port; returns ``self``."""
        if self._server is not None:
            return self
        if self._lazy and not self._bootstrapped:
            if self._admin is None:  # moto's key format: AKIA + 16; the secret: 40 characters
                alphabet = string.ascii_uppercase + string.digits
                key_id = "AKIA" + "".join(secrets.choice(alphabet) for _ in range(16))
                self._admin = AccessKey(key_id, secrets.token_urlsafe(30))
                self._vending_role_arn = f"arn:aws:iam::{self.account_id}:role/{VENDING_ROLE}"
            app: Any = _OnFirstRequest(self._wsgi_app)
        else:
            app = self._wsgi_app()
        server = make_server(self._host, self._port, app, threaded=True, request_handler=_QuietHandler)
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"s3-emulator-{server.server_port}",
            daemon=True,
        )
        self._server = server
        self._thread.start()
        return self

    def stop(self, clear: bool = False) -> None:
        """Stop serving. State stays in the process unless ``clear`` (then it is deleted)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
        if clear:
            with self._moto_lock:
                if self._bootstrapped:
                    self._clear()
                self._admin = self._vending_role_arn = None
                self._bootstrapped = False
                self._pending_buckets = []

    def __enter__(self) -> S3Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(clear=True)

    def reset(self) -> None:
        """Delete this emulator's buckets, roles, users and sessions, then bootstrap again
        (new admin credentials and vending role ARN). Other emulators are untouched."""
        with self._moto_lock:
            self._ensure_moto()
            self._clear()
            self._bootstrap()

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("S3Emulator is not started")
        return f"http://{self._host}:{self._server.server_port}"

    # --- account

    def _iam(self) -> Any:
        from moto.iam.models import iam_backends

        return iam_backends[self.account_id][self._realm.partition]

    def _s3(self) -> Any:
        from moto.s3.models import s3_backends

        return s3_backends[self.account_id][self._realm.partition]

    def _bootstrap(self, preset: AccessKey | None = None) -> None:
        iam = self._iam()
        iam.create_user(region_name=self.region, user_name=ADMIN_USER)
        key = iam.create_access_key(ADMIN_USER)
        if preset is not None:  # keys handed out before moto was loaded (lazy start): make them moto's
            del iam.access_keys[key.access_key_id]
            key.access_key_id, key.secret_access_key = preset
            iam.access_keys[key.access_key_id] = key
        admin_policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": ["s3:*", "sts:AssumeRole"], "Resource": "*"}],
        }
        iam.put_user_policy(ADMIN_USER, "lakesession-admin", json.dumps(admin_policy))
        self._admin = AccessKey(key.access_key_id, key.secret_access_key)
        promised = self._vending_role_arn if preset is not None else None
        self._vending_role_arn = self._create_role(
            VENDING_ROLE,
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": ["arn:aws:s3:::*"]}],
            },
        )
        if promised is not None and promised != self._vending_role_arn:
            raise RuntimeError(f"moto named the vending role {self._vending_role_arn}, not {promised}")

    def _clear(self) -> None:
        from moto.core.base_backend import BaseBackend
        from moto.s3.models import s3_backends
        from moto.sts.models import sts_backends

        s3 = self._s3()
        for bucket in list(s3.buckets.values()):
            for key in list(bucket.keys.values()):
                if hasattr(key, "dispose"):
                    key.dispose()
            for upload in list(bucket.multiparts.values()):
                upload.dispose()
            s3_backends.bucket_accounts.pop(bucket.name, None)
        BaseBackend.reset(s3)  # not S3Backend.reset: that disposes every account's objects
        self._iam().reset()
        sts_backends[self.account_id][self._realm.partition].reset()
        self._realm.sessions.clear()

    @property
    def admin_credentials(self) -> AccessKey:
        """``(access_key_id, secret_access_key)`` of the admin IAM user (s3:*, sts:AssumeRole)."""
        if self._admin is None:
            raise RuntimeError("S3Emulator is not started")
        return self._admin

    @property
    def admin_arn(self) -> str:
        return f"arn:aws:iam::{self.account_id}:user/{ADMIN_USER}"

    @property
    def vending_role_arn(self) -> str:
        """A role the admin may assume, allowing s3:* on every bucket; scope it with a session policy."""
        if self._vending_role_arn is None:
            raise RuntimeError("S3Emulator is not started")
        return self._vending_role_arn

    def create_bucket(self, name: str) -> None:
        """Create ``name`` in this emulator's account (idempotent for its own buckets)."""
        with self._moto_lock:
            if self._lazy and not self._bootstrapped:
                if name not in self._pending_buckets:
                    self._pending_buckets.append(name)  # created with the account, at first use
                return
        self._ensure_moto()
        from moto.s3.models import s3_backends

        owner = s3_backends.bucket_accounts.get(name)
        if owner is not None:
            if owner[1] == self.account_id:
                return
            raise ValueError(
                f"bucket {name!r} belongs to another emulator or moto user in this process (bucket names are global)"
            )
        from moto.s3.exceptions import InvalidBucketName

        try:
            self._s3().create_bucket(name, self.region)
        except InvalidBucketName:
            raise ValueError(
                f"invalid bucket name {name!r}: use 3-63 lowercase letters, digits, dots and hyphens"
            ) from None
        if self._objects is not None:
            self._objects.add_bucket(name)

    def create_role(
        self,
        name: str,
        policy_document: dict[str, Any] | str,
        *,
        trusted_principals: list[str] | None = None,
        max_session_duration: int = 43200,
    ) -> str:
        """Create a role with one inline policy, assumable by the admin (or ``trusted_principals``)."""
        self._ensure_moto()
        return self._create_role(
            name, policy_document, trusted_principals=trusted_principals, max_session_duration=max_session_duration
        )

    def _create_role(
        self,
        name: str,
        policy_document: dict[str, Any] | str,
        *,
        trusted_principals: list[str] | None = None,
        max_session_duration: int = 43200,
    ) -> str:
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": trusted_principals or [self.admin_arn]},
                    "Action": "sts:AssumeRole",
                }
            ],
        }
        iam = self._iam()
        role = iam.create_role(
            role_name=name,
            assume_role_policy_document=json.dumps(trust),
            path="/",
            permissions_boundary=None,
            description="",
            tags=[],
            max_session_duration=str(max_session_duration),
        )
        iam.put_role_policy(name, f"{name}-policy", _policy_json(policy_document))
        return role.arn

    def issued(self) -> list[Credentials]:
        """Every STS credential this emulator has issued (``AssumeRole``), expired ones included."""
        if not self._bootstrapped:
            return []
        from moto.sts.models import sts_backends

        roles = sts_backends[self.account_id][self._realm.partition].assumed_roles
        return [Credentials(r.access_key_id, r.secret_access_key, r.session_token) for r in roles]

    def expire(self, access_key_id: str) -> None:
        """Make an STS credential expire now (revocation / refresh tests)."""
        self._ensure_moto()
        session = self._realm.sessions.get(access_key_id)
        if session is None:
            raise KeyError(access_key_id)
        session.expires_at = min(session.expires_at, time.time())

    # --- boto3 conveniences (real SigV4 over loopback)

    def client(
        self, service: str = "s3", credentials: AccessKey | Credentials | dict[str, Any] | None = None, **kwargs: Any
    ) -> Any:
        """A boto3 client for this endpoint (path-style, ``.region``); admin credentials by default.
        ``credentials``: an :class:`AccessKey`, :class:`Credentials` or STS ``Credentials`` dict."""
        import boto3
        from botocore.config import Config

        if isinstance(credentials, dict):
            credentials = Credentials(
                credentials["AccessKeyId"], credentials["SecretAccessKey"], credentials.get("SessionToken")
            )
        creds = credentials or self.admin_credentials
        config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1, "mode": "standard"})
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=creds[0],
            aws_secret_access_key=creds[1],
            aws_session_token=creds[2] if len(creds) > 2 else None,
            config=kwargs.pop("config", config),
            **kwargs,
        )

    def assume(
        self,
        policy: dict[str, Any] | str | None = None,
        *,
        duration_seconds: int = 3600,
        role_arn: str | None = None,
        session_name: str = "lakesession",
    ) -> Credentials:
        """``sts:AssumeRole`` (admin credentials, vending role by default) with a session policy."""
        from botocore.config import Config

        params: dict[str, Any] = {
            "RoleArn": role_arn or self.vending_role_arn,
            "RoleSessionName": session_name,
            "DurationSeconds": duration_seconds,
        }
        if policy is not None:
            params["Policy"] = _policy_json(policy)
        # botocore validates DurationSeconds >= 900 client-side; the emulator allows less
        sts = self.client("sts", config=Config(parameter_validation=False, retries={"max_attempts": 1}))
        c = sts.assume_role(**params)["Credentials"]
        return Credentials(c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"])


def main(argv: list[str] | None = None) -> int:
    """``python -m lakesession.reference.storage.emulator BUCKET``: an emulator in its own process.

    Prints one JSON line (endpoint, region, vending role ARN and the emulator's admin key pair —
    fake credentials that exist only inside this emulator), then serves until stdin closes.
    """
    import json
    import sys

    args = sys.argv[1:] if argv is None else argv
    emulator = S3Emulator().start()
    for bucket in args:
        emulator.create_bucket(bucket)
    admin = emulator.admin_credentials
    print(
        json.dumps(
            {
                "endpoint": emulator.endpoint,
                "region": emulator.region,
                "role_arn": emulator.vending_role_arn,
                "access_key_id": admin.access_key_id,
                "secret_access_key": admin.secret_access_key,
            }
        ),
        flush=True,
    )
    sys.stdin.read()
    emulator.stop(clear=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
