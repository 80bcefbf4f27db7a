"""`lakesession serve --config FILE`: validation before binding (file:line and the fix), precedence
flags > environment > file, and a config-file server running the DEFINER/INVOKER examples with a
trusted engine configured in the file."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from lakesession.reference.serveconfig import ConfigError, resolve
from tests._serve import Served, run_serve

P = "/v1/lakesession"
OWNER = "example.run-as-owner"  # not the default: DEFINER works only if the file's setting took effect

# The examples of the view-security seed (tests/security/test_view_security.py), as one server config file.
CONFIG = """\
port: 0
catalog_name: lakesession
trusted_engines:  # the engine, and alice, whose loads the test sends as if through a trusted engine
  - {principal: spark-engine}
  - {principal: alice}
view_owner_property: example.run-as-owner
access_token_ttl: 900
bootstrap:
  principals:
    - {name: alice, type: user, client_secret: alice-pw-1}
    - {name: bob, type: user, client_secret: bob-pw-1}
    - {name: carol, type: user, client_secret: carol-pw-1}
    - {name: dave, type: user, client_secret: dave-pw-1}
    - {name: spark-engine, type: service, client_secret: engine-pw-1}
  roles:
    - {name: r_alice, members: [alice]}
    - {name: r_bob, members: [bob]}
    - {name: r_carol, members: [carol]}
    - {name: r_dave, members: [dave]}
    - {name: engine, members: [spark-engine]}
  grants:
    - {role: engine, privilege: CATALOG_MANAGE_CONTENT, on: catalog}
    - {role: r_alice, privilege: VIEW_READ, on: view db.inv}
    - {role: r_alice, privilege: TABLE_READ_DATA, on: table db.t_inv}
    - {role: r_bob, privilege: VIEW_READ, on: view db.inv}
    - {role: r_alice, privilege: VIEW_READ, on: view db.def_bob}
    - {role: r_bob, privilege: TABLE_READ_DATA, on: table db.t_def}
    - {role: r_alice, privilege: VIEW_READ, on: view db.v1}
    - {role: r_bob, privilege: VIEW_READ, on: view db.v2}
    - {role: r_bob, privilege: VIEW_READ, on: view db.v3}
    - {role: r_carol, privilege: TABLE_READ_DATA, on: table db.t_chain}
    - {role: r_dave, privilege: VIEW_READ, on: view db.def_bob}
"""
SECRETS = {
    "alice": "alice-pw-1",
    "bob": "bob-pw-1",
    "carol": "carol-pw-1",
    "dave": "dave-pw-1",
    "spark-engine": "engine-pw-1",
}


def write(tmp_path: Path, text: str, name: str = "serve.yaml") -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


# ---------------------------------------------------------------- validation (no server)
def test_unknown_key_names_line_and_suggests_the_fix(tmp_path: Path) -> None:
    f = write(tmp_path, "port: 0\nwarehouse: s3://lake/wh\ntrusted_engine: [{principal: e}]\n")
    with pytest.raises(ConfigError) as e:
        resolve(f, environ={})
    assert f"{f}:3: unknown key 'trusted_engine': did you mean 'trusted_engines'?" in str(e.value)


def test_wrong_types_name_each_line(tmp_path: Path) -> None:
    f = write(tmp_path, "access_token_ttl: soon\ns3_emulator: true\ntrusted_engines:\n  - {principle: engine}\n")
    with pytest.raises(ConfigError) as e:
        resolve(f, environ={})
    text = str(e.value)
    assert f"{f}:1: access_token_ttl: Input should be a valid integer" in text and "'soon'" in text
    assert f"{f}:4: trusted_engines.0.principle" in text  # a typo must not silently trust nobody


def test_s3_section_and_not_a_mapping(tmp_path: Path) -> None:
    f = write(tmp_path, "warehouse: s3://b/w\ns3:\n  region: eu-west-1\n  role: x\n")
    with pytest.raises(ConfigError) as e:
        resolve(f, environ={})
    assert f"{f}:4: unknown key 'role': did you mean 'role_arn'?" in str(e.value)
    assert "s3.role_arn is required" in str(e.value)
    with pytest.raises(ConfigError, match=r":1: the config file must be a mapping"):
        resolve(write(tmp_path, "- port: 1\n", "list.yaml"), environ={})
    with pytest.raises(ConfigError, match=r":3: key 'port' appears twice \(first on line 1\)"):
        resolve(write(tmp_path, "port: 1\nhost: h\nport: 2\n", "dup.yaml"), environ={})
    with pytest.raises(ConfigError, match=r":2: not valid YAML"):
        resolve(write(tmp_path, "port: 1\n  bad: [\n", "bad.yaml"), environ={})


def test_inline_bootstrap_errors_keep_file_lines(tmp_path: Path) -> None:
    f = write(tmp_path, CONFIG.replace("VIEW_READ, on: view db.v3", "VIEW_READ, on: vew db.v3"))
    line = CONFIG.splitlines().index("    - {role: r_bob, privilege: VIEW_READ, on: view db.v3}") + 1
    with pytest.raises(ConfigError, match=rf"{f}:{line}: .*vew"):
        resolve(f, environ={})


def test_precedence_flags_over_env_over_file(tmp_path: Path) -> None:
    f = write(tmp_path, CONFIG)
    env = {
        "LAKESESSION_SERVE__ACCESS_TOKEN_TTL": "600",
        "LAKESESSION_SERVE__VIEW_OWNER_PROPERTY": "owner",
        "LAKESESSION_SERVE__TRUSTED_ENGINES": "[{issuer: 'https://idp.example', audience: trino}]",
        "LAKESESSION_SERVE__S3__ROLE_ARN": "arn:aws:iam::1:role/vend",
        "UNRELATED": "x",
    }
    r = resolve(f, environ=env, flags={"access_token_ttl": ("--token-ttl", 300), "port": ("--port", None)})
    kw = r.start_kwargs
    assert kw["access_token_ttl"] == 300 and r.sources["access_token_ttl"] == "--token-ttl"
    assert kw["view_owner_property"] == "owner"
    assert kw["trusted_engines"] == [{"issuer": "https://idp.example", "audience": "trino"}]
    assert kw["s3_config"].role_arn == "arn:aws:iam::1:role/vend" and kw["s3_config"].region == "us-east-1"
    assert kw["port"] == 0 and kw["catalog_name"] == "lakesession"  # from the file
    assert [p["name"] for p in kw["bootstrap"].principals] == ["alice", "bob", "carol", "dave", "spark-engine"]
    with pytest.raises(ConfigError, match="environment variable LAKESESSION_SERVE__PORT: port: Input should be"):
        resolve(f, environ={"LAKESESSION_SERVE__PORT": "eighty"})
    with pytest.raises(ConfigError, match="environment variable LAKESESSION_SERVE__TOKEN_TTL: unknown key 'token_ttl'"):
        resolve(f, environ={"LAKESESSION_SERVE__TOKEN_TTL": "5"})


@pytest.mark.slow  # a fresh interpreter
def test_serve_refuses_bad_config_before_binding(tmp_path: Path) -> None:
    f = write(tmp_path, "port: 0\nacess_token_ttl: 900\n")
    r = run_serve(["--config", str(f), "--data-dir", str(tmp_path / "d")])
    assert r.returncode == 2 and f"{f}:2: unknown key 'acess_token_ttl'" in r.stderr
    assert not (tmp_path / "d").exists()  # nothing was created or bound


# ---------------------------------------------------------------- a config-file server, end to end
SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


def view_body(name: str, owner: str | None, sql: str) -> dict[str, object]:
    version = {
        "version-id": 1,
        "timestamp-ms": int(time.time() * 1000),
        "schema-id": 0,
        "summary": {"engine-name": "trino"},
        "representations": [{"type": "sql", "sql": sql, "dialect": "trino"}],
        "default-namespace": ["db"],
    }
    return {"name": name, "schema": SCHEMA, "view-version": version, "properties": {OWNER: owner} if owner else {}}


@pytest.mark.slow
def test_config_file_server_runs_definer_and_invoker_examples(tmp_path: Path) -> None:
    f = write(tmp_path, CONFIG)
    with Served(["--config", str(f), "--data-dir", str(tmp_path / "d")]) as srv:
        assert srv.lines["warehouse"] == "lakesession"  # the name clients request, not the storage location
        assert srv.lines["storage"].startswith("file://")
        tokens = {who: srv.token(who, secret) for who, secret in SECRETS.items()}

        def call(method: str, path: str, who: str, body: object = None) -> httpx.Response:
            h = {"Authorization": f"Bearer {tokens[who]}"}
            return httpx.request(method, f"{srv.uri}{P}{path}", headers=h, json=body, timeout=30)

        assert call("POST", "/namespaces", "spark-engine", {"namespace": ["db"]}).status_code == 200
        for t in ("t_inv", "t_def", "t_chain"):
            assert (
                call("POST", "/namespaces/db/tables", "spark-engine", {"name": t, "schema": SCHEMA}).status_code == 200
            )
        views = (  # each view reads the next object of its chain (a catalog may check that)
            ("inv", None, "SELECT id FROM t_inv"),
            ("def_bob", "bob", "SELECT id FROM db.t_def"),
            ("v1", "bob", "SELECT * FROM v2"),
            ("v2", None, "SELECT id FROM db.v3 WHERE id > 0"),
            ("v3", "carol", "SELECT id FROM t_chain"),
        )
        for name, owner, sql in views:
            r = call("POST", "/namespaces/db/views", "spark-engine", view_body(name, owner, sql))
            assert r.status_code == 200, r.text

        def load(who: str, table: str, chain: str | None = None) -> int:
            q = f"?referenced-by={chain}" if chain else ""
            return call("GET", f"/namespaces/db/tables/{table}{q}", who).status_code

        # example 1, INVOKER: alice needs the view and the table; bob has only the view (and is not trusted)
        assert load("alice", "t_inv", "db%1Finv") == 200
        assert load("bob", "t_inv", "db%1Finv") == 403
        # example 2, DEFINER (owner bob): alice reads through the view only; carol lacks the view
        assert load("alice", "t_def") == 403
        assert load("alice", "t_def", "db%1Fdef_bob") == 200
        assert load("carol", "t_def", "db%1Fdef_bob") == 403
        # dave may read def_bob too, but is not a trusted engine: his referenced-by is ignored (INVOKER on t_def)
        assert load("dave", "t_def", "db%1Fdef_bob") == 403
        # the engine named in the file is trusted: its chains are evaluated (and a too-long one refused)
        r = call("GET", "/namespaces/db/tables/t_def?referenced-by=" + ",".join(["db%1Fdef_bob"] * 11), "spark-engine")
        assert r.status_code == 400 and r.json()["error"]["type"] == "TooManyViewsInChainException"
        # example 3: alice -> v1 (DEFINER bob) -> v2 (INVOKER) -> v3 (DEFINER carol) -> t_chain
        since = time.time() - 0.001
        assert load("alice", "t_chain", "db%1Fv1,db%1Fv2,db%1Fv3") == 200
        assert load("alice", "t_chain") == 403
        audit = httpx.get(
            f"{srv.uri}/management/v1/audit",
            params={"since": str(since), "action": "load_table"},
            headers={"Authorization": f"Bearer {srv.admin_token()}"},
            timeout=30,
        ).json()
        steps = [
            (r["securable"], r["detail"]["user_in_effect"])
            for r in audit
            if r["decision"] == "allow" and r.get("detail") and "step" in r["detail"]
        ]
        assert steps == [
            ("view db.v1", "alice"),
            ("view db.v2", "bob"),
            ("view db.v3", "bob"),
            ("table db.t_chain", "carol"),
        ]


def test_sts_refusal_shows_the_stores_reason(tmp_path: Path) -> None:
    """An operator sees why STS refused (here: DurationSeconds below the store's minimum), not just 'ClientError'."""
    from lakesession.reference import bootstrap, start

    policy = "principals: [{name: e, type: service}]\nroles: [{name: r, members: [e]}]\n"
    policy += "grants: [{role: r, privilege: CATALOG_MANAGE_CONTENT, on: catalog}]\n"
    with start(
        warehouse="s3://sts-refusal/wh",
        s3_emulator=True,
        credential_ttl=0,
        data_dir=tmp_path,
        bootstrap=bootstrap.parse(policy),
    ) as h:
        headers = {"Authorization": f"Bearer {h.admin.token_for('e')}"}
        assert httpx.post(f"{h.uri}{P}/namespaces", json={"namespace": ["n"]}, headers=headers).status_code == 200
        r = httpx.post(
            f"{h.uri}{P}/namespaces/n/tables",
            json={"name": "t", "schema": SCHEMA},
            headers={**headers, "X-Iceberg-Access-Delegation": "vended-credentials"},
        )
        assert r.status_code == 503 and r.json()["error"]["type"] == "ServiceUnavailableException"
        message = r.json()["error"]["message"]
        assert "ValidationError" in message and "durationSeconds" in message, message
        assert h.settings.s3.secret_access_key not in r.text


def test_errors_never_echo_a_database_password(tmp_path: Path) -> None:
    f = write(
        tmp_path, "catalog_name: [postgresql+psycopg://u:pw-x9@h/db]\nport: 'postgresql+psycopg://u:pw-x9@h/db'\n"
    )
    with pytest.raises(ConfigError) as e:
        resolve(f, environ={})
    assert "pw-x9" not in str(e.value) and "u:***@h" in str(e.value) and f"{f}:1: catalog_name" in str(e.value)


def test_relative_paths_in_the_file_are_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "policy.yaml").write_text("principals: [{name: p1}]\n")
    f = write(tmp_path / "conf", "data_dir: state\nbootstrap: policy.yaml\n")
    kw = resolve(f, environ={}).start_kwargs
    assert kw["data_dir"] == tmp_path / "conf" / "state"
    assert [p["name"] for p in kw["bootstrap"].principals] == ["p1"]
    kw = resolve(f, environ={}, flags={"data_dir": ("--data-dir", Path("here"))}).start_kwargs
    assert kw["data_dir"] == Path("here")  # a flag is relative to the working directory, as usual


@pytest.mark.slow  # a fresh interpreter
def test_serve_names_an_invalid_bucket(tmp_path: Path) -> None:
    r = run_serve(["--port", "0", "--data-dir", str(tmp_path), "--warehouse", "s3://x/wh", "--s3-emulator"])
    assert r.returncode == 2 and "invalid bucket name 'x'" in r.stderr and "Traceback" not in r.stderr


def test_dataclass_sections_refuse_unknown_keys(tmp_path: Path) -> None:
    """Settings grouped in a dataclass of their own (rate limits, say) are as strict as top-level keys."""
    import dataclasses

    from lakesession.reference.serveconfig import section_model

    @dataclasses.dataclass
    class Limits:
        token_rate: str = "10/minute"
        max_body_bytes: int = 1024

    model = section_model(Limits)
    assert Limits(**model.model_validate({"max_body_bytes": 5}).model_dump(exclude_unset=True)) == Limits(
        "10/minute", 5
    )
    with pytest.raises(ValueError, match="token_rat"):
        model.model_validate({"token_rat": "1/second"})


@pytest.mark.slow  # a fresh interpreter
def test_unreachable_database_is_a_clean_error_without_the_password(tmp_path: Path) -> None:
    from lakesession.reference.serveconfig import normalize_db_url

    assert normalize_db_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"  # psycopg 3, not psycopg2
    assert normalize_db_url("sqlite:///x.db") == "sqlite:///x.db"
    r = run_serve(["--port", "0", "--data-dir", str(tmp_path), "--db", "postgresql://u:pw-secret-7@127.0.0.1:1/x"])
    assert r.returncode == 2 and "cannot use the catalog database" in r.stderr, r.stderr
    assert "pw-secret-7" not in r.stderr + r.stdout and "Traceback" not in r.stderr


def test_later_refusals_name_the_setting_origin(tmp_path: Path) -> None:
    f = write(tmp_path, "port: 0\nwarehouse: s3://b/w\ntrusted_engines: [{audience: lakesession}]\n")
    r = resolve(f, environ={"LAKESESSION_SERVE__WAREHOUSE": "s3://other/w"})
    message = "trusted_engines rule matches every token (audience 'lakesession')"
    assert r.explain(message) == f"{f}:3: {message}"
    assert r.explain("an s3:// warehouse needs s3=…").startswith("environment variable LAKESESSION_SERVE__WAREHOUSE: ")
    assert r.explain("something else") == "something else"
