"""The bootstrap file: policy as code for principals, roles and grants.

```yaml
principals:
  - {name: etl, type: service, client_id: etl, client_secret: s3cret}
  - {name: alice, type: user, client_id: alice, client_secret: pw}
  - {name: jupyterhub, type: service, client_secret: hub-s3cret,    # an OAuth client of the embedded
     redirect_uris: [https://hub.example.com/hub/oauth_callback]}  # issuer (authorization code + PKCE)
roles:
  - {name: analysts, members: [alice]}
locations:                          # raw prefixes outside the warehouse, registered as securables
  - {location: s3://raw-bucket/landing/}
grants:
  - {role: analysts, privilege: TABLE_READ_DATA, on: namespace sales}
  - {role: analysts, privilege: LOCATION_READ, on: location s3://raw-bucket/landing/}
```

Files are validated completely before anything is applied; an invalid file
fails with ``path:line: reason``. Applying is idempotent, so the same file can
be given on every start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .authz import Privilege, Securable, check_grant_shape
from .directory import PRINCIPAL_TYPES, Directory
from .errors import CatalogError, Conflict
from .idp._authcode import register_redirect_uris, valid_redirect_uri


class BootstrapError(ValueError):
    """An invalid bootstrap file; the message names the line and the reason."""


@dataclass
class Bootstrap:
    principals: list[dict[str, Any]] = field(default_factory=list)
    roles: list[dict[str, Any]] = field(default_factory=list)
    grants: list[dict[str, Any]] = field(default_factory=list)
    locations: list[dict[str, Any]] = field(default_factory=list)
    #: (section, index) -> "file:line" of that entry: errors found while applying name it too
    origins: dict[tuple[str, int], str] = field(default_factory=dict)

    def where(self, section: str, index: int) -> str:
        return self.origins.get((section, index), "<bootstrap>")

    def __repr__(self) -> str:  # never show client secrets
        return f"Bootstrap(principals={[p['name'] for p in self.principals]}, roles={[r['name'] for r in self.roles]}, grants={len(self.grants)})"


_KEYS = {
    "principals": ({"name"}, {"name", "type", "client_id", "client_secret", "redirect_uris"}),
    "roles": ({"name"}, {"name", "members"}),
    "grants": ({"role", "privilege", "on"}, {"role", "privilege", "on"}),
    "locations": ({"location"}, {"location"}),
}


def _where(source: str, node: yaml.Node) -> str:
    return f"{source}:{node.start_mark.line + 1}"


def _scalar(source: str, node: yaml.Node, what: str) -> str:
    if not isinstance(node, yaml.ScalarNode) or node.value == "":
        raise BootstrapError(f"{_where(source, node)}: {what} must be a non-empty string")
    return str(node.value)


def compose(text: str, source: str, error: type[ValueError] = ValueError) -> yaml.Node | None:
    """The YAML node tree (which keeps line numbers), or ``error`` naming ``source:line``."""
    try:
        return yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise error(f"{source}{line}: not valid YAML ({getattr(e, 'problem', None) or e})") from None


def parse(text: str, source: str = "<bootstrap>") -> Bootstrap:
    """Parse and validate a bootstrap document without touching any state."""
    return parse_node(compose(text, source, BootstrapError), source)


def parse_node(root: yaml.Node | None, source: str) -> Bootstrap:
    """Validate an already composed node (e.g. the ``bootstrap:`` section of a server config file),
    so errors name lines of the file it came from."""
    out = Bootstrap()
    if root is None or (isinstance(root, yaml.ScalarNode) and root.value in ("", "null", "~")):
        return out
    if not isinstance(root, yaml.MappingNode):
        raise BootstrapError(f"{_where(source, root)}: the file must be a mapping with principals, roles and grants")
    for key_node, value_node in root.value:
        section = _scalar(source, key_node, "section name")
        if section not in _KEYS:
            raise BootstrapError(
                f"{_where(source, key_node)}: unknown section {section!r} (expected principals, roles, locations, grants)"
            )
        if isinstance(value_node, yaml.ScalarNode) and value_node.value in ("", "null", "~"):
            continue
        if not isinstance(value_node, yaml.SequenceNode):
            raise BootstrapError(f"{_where(source, value_node)}: {section} must be a list")
        required, allowed = _KEYS[section]
        for item in value_node.value:
            if not isinstance(item, yaml.MappingNode):
                raise BootstrapError(f"{_where(source, item)}: each entry of {section} must be a mapping")
            entry: dict[str, Any] = {}
            for k_node, v_node in item.value:
                k = _scalar(source, k_node, "key")
                if k not in allowed:
                    raise BootstrapError(
                        f"{_where(source, k_node)}: unknown key {k!r} in {section} (allowed: {', '.join(sorted(allowed))})"
                    )
                if k in ("members", "redirect_uris"):
                    if not isinstance(v_node, yaml.SequenceNode):
                        raise BootstrapError(f"{_where(source, v_node)}: {k} must be a list")
                    entry[k] = [_scalar(source, m, k) for m in v_node.value]
                else:
                    entry[k] = _scalar(source, v_node, k)
            missing = required - entry.keys()
            if missing:
                raise BootstrapError(f"{_where(source, item)}: {section} entry is missing {', '.join(sorted(missing))}")
            _check_entry(source, section, entry, item)
            out.origins[(section, len(getattr(out, section)))] = _where(source, item)
            getattr(out, section).append(entry)
    _check_references(out)
    return out


def _check_entry(source: str, section: str, entry: dict[str, Any], node: yaml.Node) -> None:
    where = _where(source, node)
    if section == "principals":
        if entry.get("type", "user") not in PRINCIPAL_TYPES:
            raise BootstrapError(f"{where}: type must be 'user' or 'service', got {entry['type']!r}")
        if entry.get("client_secret") and not entry.get("client_id"):
            entry["client_id"] = entry["name"]
        if "redirect_uris" in entry and not entry.get("client_secret"):
            raise BootstrapError(f"{where}: redirect_uris need a client_secret (only confidential clients)")
        bad = [u for u in entry.get("redirect_uris", []) if not valid_redirect_uri(u)]
        if bad:
            raise BootstrapError(f"{where}: invalid redirect URI {bad[0]!r} (absolute https, http only on loopback)")
    if section == "locations" and not entry["location"].startswith(("s3://", "s3a://", "s3n://")):
        raise BootstrapError(f"{where}: location must be an s3 prefix such as s3://raw-bucket/landing/")
    if section == "grants":
        try:
            privilege = Privilege(entry["privilege"].upper())
        except ValueError:
            raise BootstrapError(f"{where}: unknown privilege {entry['privilege']!r}") from None
        try:
            check_grant_shape(privilege, Securable.parse(entry["on"]))
        except CatalogError as e:
            raise BootstrapError(f"{where}: {e.message}") from None


def _check_references(b: Bootstrap) -> None:
    seen: dict[str, int] = {}
    for i, p in enumerate(b.principals):
        if p["name"] in seen:
            raise BootstrapError(f"{b.where('principals', i)}: principal {p['name']!r} is defined twice")
        seen[p["name"]] = i
    roles = {r["name"] for r in b.roles}
    for i, r in enumerate(b.roles):
        for m in r.get("members", []):
            if m not in seen:
                raise BootstrapError(f"{b.where('roles', i)}: role {r['name']!r} lists unknown principal {m!r}")
    for i, g in enumerate(b.grants):
        if g["role"] not in roles:
            raise BootstrapError(
                f"{b.where('grants', i)}: grant names role {g['role']!r}, which is not defined under roles"
            )


def load(path: str | Path) -> Bootstrap:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise BootstrapError(f"{p}: cannot read bootstrap file ({e.strerror})") from None
    return parse(text, str(p))


def check(b: Bootstrap, directory: Directory) -> None:
    """What only the database can tell, checked before anything is applied: a grant on a storage location
    the file does not list must name one registered before."""
    listed = {Securable.location(loc["location"]) for loc in b.locations}
    for i, g in enumerate(b.grants):
        on = Securable.parse(g["on"])
        if on.kind == "location" and on not in listed and not directory.location_registered(on.path[0]):
            raise BootstrapError(
                f"{b.where('grants', i)}: storage location {on.path[0]!r} is not registered: "
                "add it to the file's locations: list"
            )


def apply(b: Bootstrap, directory: Directory, register_location: Callable[[str], object] | None = None) -> None:
    """Create what is missing; re-applying the same file changes nothing (also from replicas starting together).

    ``register_location`` registers a storage location (before the grants that name it). A refusal is a
    ``BootstrapError`` naming the entry's ``file:line``."""
    check(b, directory)
    if b.locations and register_location is None:
        raise BootstrapError("this catalog cannot register storage locations here (no storage-ownership index)")
    for i, p in enumerate(b.principals):
        with _entry(b, "principals", i):
            try:
                directory.create_principal(p["name"], p.get("type", "user"), p.get("client_id"), p.get("client_secret"))
            except Conflict:
                if p.get("client_secret"):
                    directory.set_client_secret(p["name"], p["client_secret"])
            if "redirect_uris" in p:
                register_redirect_uris(directory.engine, p["client_id"], p["redirect_uris"])
    existing = directory.list_roles()
    for i, r in enumerate(b.roles):
        with _entry(b, "roles", i):
            if r["name"] not in existing:
                try:
                    directory.create_role(r["name"])
                except Conflict:
                    pass  # another replica applying the same file at the same moment
            for m in r.get("members", []):
                directory.add_member(r["name"], m)
    for i, loc in enumerate(b.locations):
        with _entry(b, "locations", i):
            register_location(loc["location"])  # type: ignore[misc]
    for i, g in enumerate(b.grants):
        with _entry(b, "grants", i):
            directory.grant(g["role"], g["privilege"], g["on"])


@contextmanager
def _entry(b: Bootstrap, section: str, index: int) -> Iterator[None]:
    """The catalog refusing an entry (a name taken, a prefix overlapping a table) is ``file:line: reason``."""
    try:
        yield
    except CatalogError as e:
        raise BootstrapError(f"{b.where(section, index)}: {e.message}") from None
