"""`lakesession serve --config FILE`: every server setting in one YAML file, validated before binding.

```yaml
warehouse: s3://lake/wh
db_url: postgresql+psycopg://catalog@db.internal/lakesession
s3_emulator: true                  # or s3: {role_arn: arn:aws:iam::…:role/vend, region: eu-west-1}
                                   # (s3.web_identity: true: no storage key, docs/serve-web-identity.md)
                                   # abfss://…: adls: {account_name: …}; gs://…: gcs: {project_id: …}
trusted_engines: [{principal: engine}]
view_owner_property: trino.run-as-owner
access_token_ttl: 900
bootstrap:                         # the policy, inline (or a path to a bootstrap file)
  principals: [{name: engine, type: service, client_id: engine, client_secret: …}]
```

Top-level keys are the :class:`~.settings.ServerSettings` fields plus the process's own
(``host``, ``port``, ``data_dir``, ``s3_emulator``, ``s3_emulator_port``, ``credential_ttl``,
``bootstrap``). Precedence: command-line flags over ``LAKESESSION_SERVE__<KEY>`` environment
variables (nested keys joined with ``__``, e.g. ``LAKESESSION_SERVE__S3__ROLE_ARN``; lists and
mappings as YAML flow text) over the file. Errors name ``file:line`` (or the variable or flag),
the key and how to fix it.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_type_hints

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from . import bootstrap as bootstrap_mod
from .settings import ServerSettings
from .webidentity import DEFAULT_AUDIENCE, DEFAULT_SUBJECT, MAX_SESSION, MIN_SESSION, WebIdentity

ENV_PREFIX = "LAKESESSION_SERVE__"
_URL_PASSWORD = re.compile(r"(//[^/:@\s]*:)[^@\s]*@")


class ConfigError(ValueError):
    """An invalid server configuration; the message names where (file:line, variable, flag) and the fix."""


class WebIdentityConfig(BaseModel):
    """``s3.web_identity``: no standing storage key; STS trusts tokens the catalog's own issuer signs for it."""

    model_config = ConfigDict(extra="forbid")
    audience: str = Field(default=DEFAULT_AUDIENCE, min_length=1)
    subject: str = Field(default=DEFAULT_SUBJECT, min_length=1)
    role_arn: str | None = None
    session_duration: int = Field(default=3600, ge=MIN_SESSION, le=MAX_SESSION)
    token_ttl: int = Field(default=300, ge=60, le=3600)


class S3Config(BaseModel):
    """The ``s3:`` section: real S3/STS. The catalog's own keys come from the AWS default chain, never the
    file; with ``web_identity`` it holds no key at all (``AssumeRoleWithWebIdentity``, its issuer's tokens)."""

    model_config = ConfigDict(extra="forbid")
    role_arn: str
    region: str = "us-east-1"
    endpoint: str | None = None
    sts_endpoint: str | None = None
    path_style: bool | None = None
    web_identity: WebIdentityConfig | None = None

    @field_validator("web_identity", mode="before")
    @classmethod
    def _switch(cls, value: Any) -> Any:
        """``true`` (also ``"true"`` from the environment or ``--s3-web-identity``): every default; false: off."""
        text = value.strip().lower() if isinstance(value, str) else None
        if value is True or text in ("true", "yes", "on", "1"):
            return {}
        if value is False or text in ("false", "no", "off", "0"):
            return None
        return value

    def web(self) -> WebIdentity | None:
        """The web identity settings, or ``None`` for a standing key (``web_identity`` absent or false)."""
        return None if self.web_identity is None else WebIdentity(**self.web_identity.model_dump())


class AdlsConfig(BaseModel):
    """The ``adls:`` section (``abfss://`` warehouse). The account key comes from the environment variable
    ``account_key_env`` (default ``AZURE_STORAGE_KEY``), never the file."""

    model_config = ConfigDict(extra="forbid")
    account_name: str
    account_key_env: str = "AZURE_STORAGE_KEY"
    endpoint: str | None = None
    sas_scope: Literal["directory", "container"] = "directory"


class GcsConfig(BaseModel):
    """The ``gcs:`` section (``gs://`` warehouse): ``token_source: downscoped`` (the catalog's Application
    Default Credentials, narrowed per table) or ``local`` (emulators only: opaque tokens no store checks)."""

    model_config = ConfigDict(extra="forbid")
    project_id: str | None = None
    endpoint: str | None = None
    token_source: Literal["downscoped", "local"] = "downscoped"


_EngineKey = Literal["principal", "issuer", "audience", "subject", "authorized_party", "service_account"]

# Settings of the process (not of the catalog): where it listens and keeps its state.
_PROCESS_FIELDS: dict[str, Any] = {
    "host": (str, "127.0.0.1"),
    "port": (int, 8181),
    "workers": (int, 1),  # server processes (PostgreSQL only)
    "data_dir": (Path | None, None),
    "s3_emulator": (bool, False),
    "s3_emulator_port": (int | None, None),
    "credential_ttl": (int | None, None),  # None: the store's default (3600 s)
    "bootstrap": (Any, None),
}


# Sections that are dataclasses of their own (e.g. rate limits): key -> (strict model, dataclass)
_SECTIONS: dict[str, tuple[type[BaseModel], type]] = {}


def section_model(cls: type) -> type[BaseModel]:
    """A model of dataclass ``cls`` that refuses unknown keys; unset keys keep the dataclass defaults."""
    hints = get_type_hints(cls)
    fields: dict[str, Any] = {f.name: (hints[f.name] | None, None) for f in dataclasses.fields(cls)}
    return create_model(f"{cls.__name__}Config", __config__=ConfigDict(extra="forbid"), **fields)


def _build_model() -> type[BaseModel]:
    """One field per ServerSettings field (so fields added there are configurable at once), plus the process's."""
    hints = get_type_hints(ServerSettings)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(ServerSettings):
        hint = hints[f.name]
        if f.name == "s3":
            fields["s3"] = (S3Config | None, None)
        elif f.name in ("adls", "gcs"):
            fields[f.name] = ((AdlsConfig if f.name == "adls" else GcsConfig) | None, None)
        elif f.name == "trusted_engines":  # stricter than the dataclass: a typo must not silently trust nobody
            fields[f.name] = (list[dict[_EngineKey, str | list[str]]] | None, None)
        elif dataclasses.is_dataclass(hint) and isinstance(hint, type):
            model = section_model(hint)
            _SECTIONS[f.name] = (model, hint)
            fields[f.name] = (model | None, None)
        else:
            fields[f.name] = (hint | None, None)  # unset keys keep ServerSettings' own defaults
    fields.update(_PROCESS_FIELDS)
    return create_model("ServeConfig", __config__=ConfigDict(extra="forbid"), **fields)


ServeConfig = _build_model()
KEYS = sorted(ServeConfig.model_fields)


@dataclasses.dataclass
class Resolved:
    """What ``serve`` passes to :func:`~.server.start`, plus where the settings came from."""

    start_kwargs: dict[str, Any]
    sources: dict[str, str]
    located: Any = None

    def explain(self, message: str) -> str:
        """Prefix a later error (e.g. the server refusing a trust rule) with where the setting it names came from."""
        # a key as a word, not a URL scheme or an argument (``s3://``, ``s3=``, ``s3_emulator=True``)
        found = [(m.start(), k) for k in KEYS if (m := re.search(rf"\b{re.escape(k)}\b(?![:/=_-])", message))]
        key = min(found)[1] if found else None  # the setting named first is the one refused
        return f"{self.located.where((key,))}: {message}" if key and self.located is not None else message


class _Located:
    """Maps a key path to where its value came from: a YAML node's line, an env variable, a flag."""

    def __init__(self, root: yaml.Node | None, source: str):
        self.root, self.source = root, source
        self.overrides: dict[tuple[str, ...], str] = {}

    def where(self, loc: tuple[Any, ...]) -> str:
        for n in range(len(loc), 0, -1):
            hit = self.overrides.get(tuple(str(p) for p in loc[:n]))
            if hit:
                return hit
        node, line = self.root, None
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                match = next(((k, v) for k, v in node.value if k.value == part), None)
                if match is None:
                    break
                line, node = match[0].start_mark.line + 1, match[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                break
        return f"{self.source}:{line}" if line else self.source


def _no_duplicates(node: yaml.Node, source: str) -> None:
    """YAML keeps the last of two equal keys silently; a config file must not (which one did the operator mean?)."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k, v in node.value:
            line = k.start_mark.line + 1
            if isinstance(k, yaml.ScalarNode) and k.value in seen:
                raise ConfigError(f"{source}:{line}: key {k.value!r} appears twice (first on line {seen[k.value]})")
            seen[str(getattr(k, "value", ""))] = line
            _no_duplicates(v, source)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _no_duplicates(item, source)


def _hint(err: Mapping[str, Any], loc: tuple[Any, ...]) -> str:
    """The fix, in words."""
    kind = err["type"]
    if kind == "extra_forbidden":
        nested: dict[str, type[BaseModel]] = {"s3": S3Config, **{k: m for k, (m, _) in _SECTIONS.items()}}
        nested["s3.web_identity"] = WebIdentityConfig
        section = ".".join(str(p) for p in loc[:-1])
        allowed = sorted(nested[section].model_fields) if section in nested else KEYS
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown key {loc[-1]!r}: {guess}allowed keys: {', '.join(allowed)}"
    name = ".".join(str(p) for p in loc)
    if kind == "missing":
        return f"{name} is required"
    example = {"trusted_engines": " (e.g. [{principal: engine}])", "extra_config": " (a mapping of strings)"}
    return f"{name}: {err['msg']} (got {_shown(err.get('input'))}){example.get(str(loc[0]), '')}"


def normalize_db_url(url: str) -> str:
    """``postgresql://`` means psycopg 3 here (the ``postgres`` extra), not SQLAlchemy's default psycopg2."""
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return "postgresql+psycopg://" + url[len(plain) :]
    return url


def mask_password(text: str) -> str:
    """Hide the password of any URL in ``text`` (database URLs carry one)."""
    return _URL_PASSWORD.sub(r"\1***@", text)


def _shown(value: Any) -> str:
    """The offending value, short and with any URL password masked (a db_url may carry one)."""
    if isinstance(value, dict | list):
        return type(value).__name__
    text = mask_password(repr(value))
    return text if len(text) <= 80 else text[:77] + "..."


def _env_value(text: str) -> Any:
    """Environment values are strings; lists and mappings are written as YAML flow text."""
    stripped = text.strip()
    if stripped[:1] in ("[", "{"):
        try:
            return yaml.safe_load(stripped)
        except yaml.YAMLError:
            return text
    return text


def _set(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        nested = data.get(part)
        if not isinstance(nested, dict):
            nested = data[part] = {}
        data = nested
    data[path[-1]] = value


def resolve(
    config_file: str | Path | None,
    *,
    flags: Mapping[str, tuple[str, Any]] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Resolved:
    """Merge file, environment and flags; validate everything (including the bootstrap policy).

    ``flags`` maps a key path (``"s3.role_arn"``) to ``(flag as typed, value)``; ``None`` values were not given.
    """
    source = str(config_file) if config_file is not None else "<no config file>"
    root: yaml.Node | None = None
    data: dict[str, Any] = {}
    if config_file is not None:
        try:
            text = Path(config_file).read_text()
        except OSError as e:
            raise ConfigError(f"{source}: cannot read the config file ({e.strerror})") from None
        root = bootstrap_mod.compose(text, source, ConfigError)
        if root is not None and not (isinstance(root, yaml.ScalarNode) and root.value in ("", "~", "null")):
            if not isinstance(root, yaml.MappingNode):
                raise ConfigError(f"{source}:{root.start_mark.line + 1}: the config file must be a mapping of settings")
            _no_duplicates(root, source)
            data = yaml.safe_load(text) or {}
    located = _Located(root, source)
    env = os.environ if environ is None else environ
    for var, raw in env.items():
        if var.startswith(ENV_PREFIX):
            path = tuple(p.lower() for p in var[len(ENV_PREFIX) :].split("__"))
            _set(data, path, _env_value(raw))
            located.overrides[path] = f"environment variable {var}"
    for key, (flag, value) in (flags or {}).items():
        if value is not None:
            path = tuple(key.split("."))
            _set(data, path, value)
            located.overrides[path] = flag
    try:
        cfg = ServeConfig.model_validate(data)
    except ValidationError as e:
        problems = [f"{located.where(tuple(err['loc']))}: {_hint(err, tuple(err['loc']))}" for err in e.errors()]
        raise ConfigError("\n".join(problems)) from None
    values = cfg.model_dump(exclude_unset=True)
    kwargs: dict[str, Any] = {k: v for k, v in values.items() if k not in ("bootstrap", "s3", "adls", "gcs", "db_url")}
    for k, (_, default) in _PROCESS_FIELDS.items():
        kwargs.setdefault(k, default)
    kwargs.pop("bootstrap", None)
    for key, (_, cls) in _SECTIONS.items():
        if isinstance(kwargs.get(key), dict):
            kwargs[key] = cls(**kwargs[key])
    data_dir = kwargs.get("data_dir")
    if (
        data_dir is not None
        and not data_dir.is_absolute()
        and config_file is not None
        and ("data_dir",) not in located.overrides
    ):
        kwargs["data_dir"] = Path(config_file).parent / data_dir  # paths in the file are relative to the file
    if "db_url" in values:
        kwargs["db"] = normalize_db_url(values["db_url"])
    kwargs["bootstrap"] = _bootstrap(data.get("bootstrap"), root, located, config_file)
    if cfg.s3 is not None:  # type: ignore[attr-defined]
        kwargs["s3_config"] = cfg.s3  # type: ignore[attr-defined]
        _check_web_identity(cfg, located)
    for cloud in ("adls", "gcs"):
        if getattr(cfg, cloud) is not None:
            kwargs[f"{cloud}_config"] = getattr(cfg, cloud)
    return Resolved(kwargs, {".".join(k): v for k, v in located.overrides.items()}, located)


def _bootstrap(
    value: Any, root: yaml.Node | None, located: _Located, config_file: str | Path | None
) -> bootstrap_mod.Bootstrap | None:
    """Inline policy (errors keep the config file's line numbers) or a path to a bootstrap file."""
    if value is None:
        return None
    try:
        if isinstance(value, str | Path):
            path = Path(value)
            if not path.is_absolute() and config_file is not None and ("bootstrap",) not in located.overrides:
                path = Path(config_file).parent / path
            return bootstrap_mod.load(path)
        if ("bootstrap",) in located.overrides or root is None or not isinstance(root, yaml.MappingNode):
            return bootstrap_mod.parse(yaml.safe_dump(value), located.where(("bootstrap",)))
        node = next(v for k, v in root.value if k.value == "bootstrap")
        return bootstrap_mod.parse_node(node, located.source)
    except bootstrap_mod.BootstrapError as e:
        raise ConfigError(f"{e} (in the bootstrap policy: principals, roles, grants)") from None


def _check_web_identity(cfg: Any, located: _Located) -> None:
    """``s3.web_identity`` needs the embedded issuer, and tokens the catalog itself would never accept."""
    web = cfg.s3.web()
    if web is None:
        return
    where = located.where(("s3", "web_identity"))
    if cfg.issuer_url is not None:
        raise ConfigError(
            f"{where}: s3.web_identity needs the embedded issuer (it signs the catalog's tokens), but "
            f"{located.where(('issuer_url',))} sets issuer_url: remove one of them"
        )
    audience = cfg.audience if cfg.audience is not None else ServerSettings.audience
    if web.audience == audience:
        raise ConfigError(
            f"{where}: s3.web_identity.audience {web.audience!r} is the catalog's own audience: tokens for STS "
            "would be access tokens to this catalog; use the audience the store's OIDC provider expects "
            f"(e.g. {DEFAULT_AUDIENCE!r})"
        )


def s3_settings(s3: S3Config, credential_ttl: int) -> Any:
    """Real S3/STS settings; the catalog's own keys come from the AWS default chain (environment, profile, role),
    except with ``web_identity``: then it holds no key (any in the environment is ignored)."""
    import boto3

    from .vending import S3Settings

    web = s3.web()
    if web is not None:
        return S3Settings(
            role_arn=s3.role_arn,
            region=s3.region,
            endpoint=s3.endpoint,
            sts_endpoint=s3.sts_endpoint,
            path_style=s3.path_style if s3.path_style is not None else s3.endpoint is not None,
            credential_ttl=credential_ttl,
            web_identity=web,
        )
    creds = boto3.Session().get_credentials()
    frozen = creds.get_frozen_credentials() if creds is not None else None
    return S3Settings(
        role_arn=s3.role_arn,
        region=s3.region,
        endpoint=s3.endpoint,
        sts_endpoint=s3.sts_endpoint,
        access_key_id=frozen.access_key if frozen else None,
        secret_access_key=frozen.secret_key if frozen else None,
        session_token=frozen.token if frozen else None,
        path_style=s3.path_style if s3.path_style is not None else s3.endpoint is not None,
        credential_ttl=credential_ttl,
    )


def adls_settings(adls: AdlsConfig, credential_ttl: int) -> Any:
    """ADLS vending settings; the account key from the environment (never the file, never printed)."""
    from .cloudvending import AdlsSettings

    key = os.environ.get(adls.account_key_env)
    if not key:
        raise ConfigError(
            f"adls: the storage account key is not in the environment: set {adls.account_key_env}=<account key> "
            "(or adls.account_key_env to the variable that holds it)"
        )
    return AdlsSettings(
        adls.account_name, key, endpoint=adls.endpoint, sas_scope=adls.sas_scope, credential_ttl=credential_ttl
    )


def gcs_settings(gcs: GcsConfig, credential_ttl: int) -> Any:
    """GCS vending settings: downscoped tokens from the catalog's ADC, or (emulators) local ones."""
    from .gcsvending import DownscopedTokenSource, GcsSettings, LocalTokenSource

    if gcs.token_source == "local" and not gcs.endpoint:
        raise ConfigError("gcs.token_source: local mints tokens no GCS accepts: only with gcs.endpoint (an emulator)")
    source = LocalTokenSource() if gcs.token_source == "local" else DownscopedTokenSource()
    return GcsSettings(gcs.project_id, gcs.endpoint, source, credential_ttl=credential_ttl)
