"""Principals, roles and grants: who exists, who belongs where, and who may do what.

Client secrets are stored only as salted PBKDF2 hashes. Effective grants and principals are
cached, tagged with the shared grants version (``grantsversion.py``) they were read under: every change
here moves that one row in its own transaction, a request reads the row once (``fresh_since``), and a
cached value is reused only while the row is unchanged, so a revocation on any replica sharing the
database holds from the next request on. Calls outside a request reuse a read of the row for 2 s.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from sqlalchemy import Engine, and_, delete, insert, select
from sqlalchemy.exc import IntegrityError

from . import store
from .authz import Grant, Privilege, Securable, allowed, check_grant_shape, parse_privilege
from .errors import BadRequest, Conflict, NotFound
from .grantsversion import GrantsVersion

PRINCIPAL_TYPES = ("user", "service")
_PBKDF2_ROUNDS = 60_000
_CACHE_SECONDS = 2.0
#: privileges a role must not bring through a token's group names unless the operator says so
TOKEN_PRIVILEGES = frozenset({Privilege.CATALOG_MANAGE_ACCESS, Privilege.TOKEN_EXCHANGE})


@dataclass(frozen=True)
class Principal:
    name: str
    type: str = "user"
    client_id: str | None = None

    def __repr__(self) -> str:
        return f"Principal(name={self.name!r}, type={self.type!r})"


@dataclass(frozen=True)
class TokenAccess:
    """The roles a token's group names bring into effect (declared, not privileged) and their grants."""

    roles: frozenset[str]
    grants: tuple[Grant, ...]


_NO_ACCESS = TokenAccess(frozenset(), ())


def hash_secret(secret: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", secret.encode(), salt, _PBKDF2_ROUNDS)
    return f"pbkdf2_sha256${_PBKDF2_ROUNDS}${salt.hex()}${digest.hex()}"


def verify_secret(secret: str, stored: str | None) -> bool:
    if not stored:
        return False
    try:
        _, rounds, salt, digest = stored.split("$")
        candidate = hashlib.pbkdf2_hmac("sha256", secret.encode(), bytes.fromhex(salt), int(rounds))
    except ValueError:
        return False
    return hmac.compare_digest(candidate.hex(), digest)


_DUMMY_HASH: list[str] = []  # one hash of a random secret, made on first use


def _dummy_hash() -> str:
    """A hash no secret matches, with the real rounds: unknown client ids cost exactly one PBKDF2 too."""
    if not _DUMMY_HASH:
        _DUMMY_HASH.append(hash_secret(secrets.token_urlsafe(32)))
    return _DUMMY_HASH[0]


def _check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > 255:
        raise BadRequest(f"Invalid {kind} name {name!r}: a non-empty string of at most 255 characters is required")
    return name.strip()


class Directory:
    """The principal/role/grant store with effective grants and principals cached under the grants version."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.version = GrantsVersion(engine, _CACHE_SECONDS)
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[object, tuple[Grant, ...]]] = {}  # principal -> (version read under, grants)
        self._secret_cache: dict[tuple[str, str], float] = {}
        self._principals: dict[str, tuple[object, Principal | None]] = {}
        self._token_cache: dict[frozenset[str], tuple[object, TokenAccess]] = {}  # a token's role names -> access
        #: roles a token may bring although they hold a privileged grant (``ServerSettings.token_privileged_roles``)
        self.token_privileged_roles: frozenset[str] = frozenset()
        #: names no principal may take, and why (``s3.web_identity.subject``: tokens of that subject open storage)
        self.reserved: dict[str, str] = {}

    # -- principals -------------------------------------------------------
    def create_principal(
        self, name: str, type: str = "user", client_id: str | None = None, client_secret: str | None = None
    ) -> Principal:
        name = _check_name("principal", name)
        if name in self.reserved:
            raise BadRequest(f"Principal name {name!r} is reserved: {self.reserved[name]}")
        if type not in PRINCIPAL_TYPES:
            raise BadRequest(f"Invalid principal type {type!r}: expected 'user' or 'service'")
        if client_secret is not None and client_id is None:
            client_id = name
        secret_hash = hash_secret(client_secret) if client_secret else None
        row = {
            "name": name,
            "type": type,
            "client_id": client_id,
            "secret_hash": secret_hash,
            "created_at": time.time(),
        }
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(store.principals).values(**row))
                self.version.bump(conn)
        except IntegrityError:
            raise Conflict(f"Principal {name!r} (or client id {client_id!r}) already exists") from None
        self._forget()
        if client_secret and secret_hash:
            self._remember_secret(secret_hash, client_secret)
        return Principal(name, type, client_id)

    def get_principal(self, name: str, fresh_since: float | None = None) -> Principal | None:
        """The principal named ``name`` (looked up on every request: cached while the grants version holds)."""
        version = self.version.current(fresh_since)
        hit = self._principals.get(name)
        if hit is not None and hit[0] == version:
            return hit[1]
        with self.engine.connect() as conn:
            row = conn.execute(select(store.principals).where(store.principals.c.name == name)).first()
        principal = Principal(row.name, row.type, row.client_id) if row else None
        with self._lock:
            if len(self._principals) > 10_000:
                self._principals.clear()
            self._principals[name] = (version, principal)
        return principal

    def list_principals(self) -> list[Principal]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(store.principals).order_by(store.principals.c.name)).all()
        return [Principal(r.name, r.type, r.client_id) for r in rows]

    def delete_principal(self, name: str) -> None:
        with self.engine.begin() as conn:
            if conn.execute(delete(store.principals).where(store.principals.c.name == name)).rowcount == 0:
                raise NotFound(f"Principal {name!r} does not exist")
            conn.execute(delete(store.role_members).where(store.role_members.c.principal == name))
            self.version.bump(conn)
        self._forget()

    def authenticate_client(self, client_id: str, client_secret: str) -> Principal | None:
        """The principal owning these client credentials, or None.

        Every refusal costs the same one PBKDF2 verification: an unknown client id (or one without a
        secret) is checked against a dummy hash, so response times do not reveal which ids exist.
        """
        with self.engine.connect() as conn:
            row = conn.execute(select(store.principals).where(store.principals.c.client_id == client_id)).first()
        if row is None or not row.secret_hash:
            verify_secret(client_secret, _dummy_hash())
            return None
        key = (row.secret_hash or "", hashlib.sha256(client_secret.encode()).hexdigest())
        if key in self._secret_cache or verify_secret(client_secret, row.secret_hash):
            self._secret_cache[key] = time.time()
            return Principal(row.name, row.type, row.client_id)
        return None

    def _remember_secret(self, secret_hash: str, client_secret: str) -> None:
        """A hash this process just made from ``client_secret`` needs no PBKDF2 to verify it (e.g. the embedded
        demo user's login right after its creation): the cache entry is the one a verification would add."""
        self._secret_cache[(secret_hash, hashlib.sha256(client_secret.encode()).hexdigest())] = time.time()

    def set_client_secret(self, name: str, client_secret: str) -> None:
        secret_hash = hash_secret(client_secret)
        with self.engine.begin() as conn:
            res = conn.execute(
                store.principals.update().where(store.principals.c.name == name).values(secret_hash=secret_hash)
            )
            if res.rowcount == 0:
                raise NotFound(f"Principal {name!r} does not exist")
        self._remember_secret(secret_hash, client_secret)

    # -- roles ------------------------------------------------------------
    def create_role(self, name: str, members: list[str] | None = None) -> None:
        name = _check_name("role", name)
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(store.roles).values(name=name, created_at=time.time()))
                self.version.bump(conn)
        except IntegrityError:
            raise Conflict(f"Role {name!r} already exists") from None
        self._forget()
        for m in members or []:
            self.add_member(name, m)

    def list_roles(self) -> dict[str, list[str]]:
        with self.engine.connect() as conn:
            names = [r.name for r in conn.execute(select(store.roles.c.name).order_by(store.roles.c.name))]
            members = conn.execute(select(store.role_members)).all()
        out: dict[str, list[str]] = {n: [] for n in names}
        for m in members:
            out.setdefault(m.role, []).append(m.principal)
        return {k: sorted(v) for k, v in out.items()}

    def delete_role(self, name: str) -> None:
        with self.engine.begin() as conn:
            if conn.execute(delete(store.roles).where(store.roles.c.name == name)).rowcount == 0:
                raise NotFound(f"Role {name!r} does not exist")
            conn.execute(delete(store.role_members).where(store.role_members.c.role == name))
            conn.execute(delete(store.grants).where(store.grants.c.role == name))
            self.version.bump(conn)
        self._forget()

    def _require(self, table: object, name: str, what: str) -> None:
        with self.engine.connect() as conn:
            if conn.execute(select(table.c.name).where(table.c.name == name)).first() is None:  # type: ignore[attr-defined]
                raise NotFound(f"{what} {name!r} does not exist")

    def add_member(self, role: str, principal: str) -> None:
        self._require(store.roles, role, "Role")
        self._require(store.principals, principal, "Principal")
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(store.role_members).values(role=role, principal=principal))
                self.version.bump(conn)
        except IntegrityError:
            pass  # already a member: idempotent
        self._forget()

    def remove_member(self, role: str, principal: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                delete(store.role_members).where(
                    and_(store.role_members.c.role == role, store.role_members.c.principal == principal)
                )
            )
            self.version.bump(conn)
        self._forget()

    # -- grants -----------------------------------------------------------
    def grant(self, role: str, privilege: str | Privilege, on: str | Securable) -> Grant:
        g = Grant(
            role,
            parse_privilege(privilege) if isinstance(privilege, str) else privilege,
            Securable.parse(on) if isinstance(on, str) else on,
        )
        check_grant_shape(g.privilege, g.on)
        if g.on.kind == "location" and not self.location_registered(g.on.path[0]):
            raise BadRequest(
                f"Storage location {g.on.path[0]!r} is not registered; register it first "
                "(POST /management/v1/locations, or the bootstrap file's locations: list)"
            )
        self._require(store.roles, role, "Role")
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    insert(store.grants).values(
                        role=g.role, privilege=g.privilege.value, securable=str(g.on), created_at=time.time()
                    )
                )
                self.version.bump(conn)
        except IntegrityError:
            pass  # granting twice is a no-op
        self._forget()
        return g

    def location_registered(self, prefix: str) -> bool:
        """Whether ``prefix`` (normalised, as in ``Securable.location``) is a registered storage location."""
        c = store.locations.c
        with self.engine.connect() as conn:
            row = conn.execute(select(c.prefix).where(c.prefix == prefix, c.owner_kind == "location")).first()
        return row is not None

    def revoke(self, role: str, privilege: str | Privilege, on: str | Securable) -> bool:
        """Remove one grant; True when removed. Revoking what does not exist (an unknown role, a grant the
        role does not hold: a misspelled securable) is ``NotFound`` naming it, never a silent no-op: the
        operator who revokes ``readers`` instead of ``reader`` must learn the principal kept its access."""
        priv = parse_privilege(privilege) if isinstance(privilege, str) else privilege
        sec = Securable.parse(on) if isinstance(on, str) else on
        self._require(store.roles, role, "Role")
        with self.engine.begin() as conn:
            n = conn.execute(
                delete(store.grants).where(
                    and_(
                        store.grants.c.role == role,
                        store.grants.c.privilege == priv.value,
                        store.grants.c.securable == str(sec),
                    )
                )
            ).rowcount
            self.version.bump(conn)
        self._forget()
        if n == 0:
            raise NotFound(f"Role {role!r} does not hold {priv.value} on {sec}: nothing was revoked")
        return True

    def list_grants(self, role: str | None = None) -> list[Grant]:
        q = select(store.grants).order_by(store.grants.c.id)
        if role is not None:
            q = q.where(store.grants.c.role == role)
        with self.engine.connect() as conn:
            rows = conn.execute(q).all()
        return [Grant(r.role, Privilege(r.privilege), Securable.parse(r.securable)) for r in rows]

    def grants_of(self, principal: str, fresh_since: float | None = None) -> tuple[Grant, ...]:
        """Every grant reaching ``principal`` through its roles (cached while the grants version holds).

        ``fresh_since`` (a request's ``time.monotonic()`` start): the grants version is taken from a read
        begun after it, so a revocation by any server sharing the database holds from the next request on,
        while the checks of one request share one read. The version is read before the grants: grants newer
        than their tag only cost one more read later, never the reverse."""
        version = self.version.current(fresh_since)
        hit = self._cache.get(principal)
        if hit is not None and hit[0] == version:
            return hit[1]
        q = (
            select(store.grants)
            .join(store.role_members, store.role_members.c.role == store.grants.c.role)
            .where(store.role_members.c.principal == principal)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(q).all()
        result = tuple(Grant(r.role, Privilege(r.privilege), Securable.parse(r.securable)) for r in rows)
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[principal] = (version, result)
        return result

    def token_access(self, roles: frozenset[str], fresh_since: float | None = None) -> TokenAccess:
        """What the role names a token's ``roles_claim`` carried give: the declared roles among them and their grants.

        A role holding a privileged grant (``TOKEN_PRIVILEGES``: access management, acting for others) is left
        out unless listed in ``token_privileged_roles``, decided on the role's grants of this request: granting
        it such a privilege later takes it from every token at once. Cached per set of names while the grants
        version holds, like ``grants_of``: a grant to the role applies to the token's holder on the next request."""
        if not roles:
            return _NO_ACCESS
        version = self.version.current(fresh_since)
        hit = self._token_cache.get(roles)
        if hit is not None and hit[0] == version:
            return hit[1]
        names = sorted(roles)
        with self.engine.connect() as conn:
            declared = set(conn.execute(select(store.roles.c.name).where(store.roles.c.name.in_(names))).scalars())
            rows = conn.execute(select(store.grants).where(store.grants.c.role.in_(names))).all()
        grants = [Grant(r.role, Privilege(r.privilege), Securable.parse(r.securable)) for r in rows]
        privileged = {g.role for g in grants if g.privilege in TOKEN_PRIVILEGES} - self.token_privileged_roles
        in_effect = frozenset(declared - privileged)
        result = TokenAccess(in_effect, tuple(g for g in grants if g.role in in_effect))
        with self._lock:
            if len(self._token_cache) > 10_000:
                self._token_cache.clear()
            self._token_cache[roles] = (version, result)
        return result

    def is_allowed(
        self,
        principal: str,
        privilege: Privilege,
        target: Securable,
        fresh_since: float | None = None,
        roles: frozenset[str] = frozenset(),
    ) -> bool:
        """``principal``'s own grants, plus those of the token's ``roles`` (``token_access``)."""
        if allowed(self.grants_of(principal, fresh_since), privilege, target):
            return True
        return bool(roles) and allowed(self.token_access(roles, fresh_since).grants, privilege, target)

    def invalidate(self) -> None:
        """Grants changed outside this class (a storage location's, dropped with it): move the shared version
        (in a transaction of its own, after the change committed) and forget locally."""
        with self.engine.begin() as conn:
            self.version.bump(conn)
        self._forget()

    def _forget(self) -> None:
        """A change committed here: no local read from before it is reused (other replicas see the version)."""
        self.version.forget()
        with self._lock:
            self._cache.clear()
            self._principals.clear()
            self._token_cache.clear()
