"""The bootstrap file: validation with line numbers, idempotent application."""

from __future__ import annotations

import pytest

from lakesession.reference import BootstrapError, store
from lakesession.reference import bootstrap as b
from lakesession.reference.directory import Directory

GOOD = """\
principals:
  - {name: etl, type: service, client_id: etl, client_secret: s3cret-value}
  - {name: alice, type: user, client_secret: pw-value}
roles:
  - {name: analysts, members: [alice]}
grants:
  - {role: analysts, privilege: table_read_data, on: namespace sales}
"""


@pytest.mark.parametrize(
    "text,line,reason",
    [
        ("principals:\n  - {name: a, type: robot}\n", 2, "type must be"),
        ("principals:\n  - {name: a}\nroles:\n  - {name: r, members: [zed]}\n", None, "unknown principal 'zed'"),
        ("grants:\n  - {role: r, privilege: TABLE_READ_DATA, on: namespace s}\n", None, "not defined under roles"),
        ("roles:\n  - {name: r}\ngrants:\n  - {role: r, privilege: TABLE_EAT, on: catalog}\n", 4, "unknown privilege"),
        (
            "roles:\n  - {name: r}\ngrants:\n  - {role: r, privilege: TABLE_READ_DATA, on: shelf x}\n",
            4,
            "Unknown securable",
        ),
        (
            "roles:\n  - {name: r}\ngrants:\n\n  - {role: r, privilege: TABLE_READ_DATA, on: table orders}\n",
            5,
            "namespace and a name",
        ),
        ("principals:\n  - {name: a, colour: red}\n", 2, "unknown key 'colour'"),
        ("principals: {name: a}\n", 1, "must be a list"),
        ("users:\n  - a\n", 1, "unknown section 'users'"),
        ("principals:\n  - [a, b]\n", 2, "must be a mapping"),
        ("principals:\n  - {type: user}\n", 2, "missing name"),
        ("principals: [\n", 2, "not valid YAML"),
    ],
)
def test_invalid_files_name_line_and_reason(text: str, line: int | None, reason: str) -> None:
    with pytest.raises(BootstrapError) as e:
        b.parse(text, "policy.yaml")
    msg = str(e.value)
    assert reason in msg
    assert msg.startswith(f"policy.yaml:{line}:" if line else "policy.yaml:")


def test_apply_is_idempotent_and_hides_secrets(tmp_path) -> None:  # type: ignore[no-untyped-def]
    directory = Directory(store.make_engine(store.sqlite_url(tmp_path / "c.db")))
    parsed = b.parse(GOOD)
    assert "s3cret" not in repr(parsed)
    for _ in range(2):
        b.apply(parsed, directory)
    assert [p.name for p in directory.list_principals()] == ["alice", "etl"]
    assert directory.list_roles() == {"analysts": ["alice"]}
    assert [g.as_dict() for g in directory.list_grants()] == [
        {"role": "analysts", "privilege": "TABLE_READ_DATA", "on": "namespace sales"}
    ]
    assert directory.authenticate_client("etl", "s3cret-value").name == "etl"
    assert directory.authenticate_client("alice", "pw-value").name == "alice"  # client_id defaults to the name
    assert directory.authenticate_client("etl", "wrong") is None


def test_start_fails_fast_on_invalid_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from lakesession.reference import start

    bad = tmp_path / "policy.yaml"
    bad.write_text("principals:\n  - {name: a, type: robot}\n")
    with pytest.raises(BootstrapError, match=r"policy.yaml:2: type must be"):
        start(data_dir=tmp_path / "d", bootstrap=bad)
