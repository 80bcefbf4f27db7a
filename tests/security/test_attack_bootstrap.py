"""A malformed bootstrap file (issue #32, item 4), given to ``lakesession serve`` as an operator would.

Every mistake is one line ``file:line: reason`` on stderr and exit code 2, never a Python traceback; and
the failed start leaves nothing half-made: a data dir it created is gone, one that existed is as it was
(before the fix, a grant the catalog refused while applying was a traceback after the database, the
issuer key and an admin secret had been written).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakesession.reference import servecmd
from tests._serve import run_serve

HEAD = "principals:\n  - {name: ann, client_secret: ann-pw-1}\nroles:\n  - {name: r, members: [ann]}\n"
# (name, file text, the line the error must name, words of the reason)
SHAPES = [
    ("nested-locations", HEAD + "locations:\n  raw:\n    location: s3://raw/landing/\n", 6, "locations must be a list"),
    (
        "nested-location-value",
        HEAD + "locations:\n  - location:\n      url: s3://raw/landing/\n",
        7,
        "location must be a non-empty string",
    ),
    ("members-not-a-list", HEAD.replace("[ann]", "ann"), 4, "members must be a list"),
    ("unknown-key", HEAD + "grants:\n  - {role: r, privilege: TABLE_READ_DATA, on: catalog, to: ann}\n", 6, "'to'"),
    (
        "token-exchange-on-a-namespace",
        HEAD + "grants:\n  - {role: r, privilege: TOKEN_EXCHANGE, on: namespace sales}\n",
        6,
        "TOKEN_EXCHANGE is granted on 'catalog' only",
    ),
    (
        "location-privilege-on-a-table",
        HEAD + "grants:\n  - {role: r, privilege: LOCATION_READ, on: table sales.orders}\n",
        6,
        "LOCATION_READ is granted on 'location",
    ),
    (
        "unregistered-location",
        HEAD + "grants:\n  - {role: r, privilege: LOCATION_READ, on: location s3://raw/landing/}\n",
        6,
        "'s3://raw/landing/' is not registered",
    ),
    ("bucket-root-location", HEAD + "locations:\n  - {location: s3://raw}\n", 6, "Invalid storage location"),
    ("unknown-role", HEAD + "grants:\n  - {role: readers, privilege: TABLE_READ_DATA, on: catalog}\n", 6, "'readers'"),
    ("principal-twice", HEAD.replace("roles:", "  - {name: ann}\nroles:"), 3, "'ann' is defined twice"),
]


def one_line(stderr: str, path: Path, line: int, reason: str) -> None:
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr and len(lines) == 1, stderr
    assert re.match(rf"{re.escape(str(path))}:{line}: ", lines[0]) and reason in lines[0], stderr


@pytest.fixture
def in_process_serve() -> Iterator[None]:
    """``servecmd.serve`` in this process installs SIGINT/SIGTERM handlers: give pytest its own back."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize(("name", "text", "line", "reason"), SHAPES, ids=[s[0] for s in SHAPES])
def test_attack_bad_bootstrap_is_file_line_reason_and_no_data_dir(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    in_process_serve: None,
    name: str,
    text: str,
    line: int,
    reason: str,
) -> None:
    bad = tmp_path / f"{name}.yaml"
    bad.write_text(text)
    data = tmp_path / "data"
    code = servecmd.main(["--port", "0", "--bootstrap", str(bad), "--data-dir", str(data)])
    out = capsys.readouterr()
    assert code == 2, out
    one_line(out.err, bad, line, reason)
    assert not data.exists()  # before: a traceback after catalog.db, issuer-key.json, admin-credentials


def test_attack_bad_bootstrap_through_the_real_command(tmp_path: Path) -> None:
    """The real ``lakesession serve`` subprocess: a config file's inline policy with a grant the catalog
    refuses (before the fix: a traceback, and catalog.db, issuer-key.json, admin-credentials left behind)."""
    cfg = tmp_path / "serve.yaml"
    grant = "  grants:\n    - {role: r, privilege: TOKEN_EXCHANGE, on: namespace sales}\n"
    cfg.write_text("port: 0\nbootstrap:\n" + "".join(f"  {x}\n" for x in HEAD.splitlines()) + grant)
    data = tmp_path / "data"
    r = run_serve(["--config", str(cfg), "--data-dir", str(data)])
    assert r.returncode == 2, r.stderr
    one_line(r.stderr, cfg, 8, "TOKEN_EXCHANGE is granted on 'catalog' only")
    assert not data.exists()


def test_attack_bad_bootstrap_leaves_an_existing_data_dir_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], in_process_serve: None
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "notes.txt").write_text("the operator's own file\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(HEAD + "grants:\n  - {role: r, privilege: LOCATION_WRITE, on: location s3://raw/x/}\n")
    code = servecmd.main(["--port", "0", "--bootstrap", str(bad), "--data-dir", str(data)])
    err = capsys.readouterr().err
    assert code == 2, err
    one_line(err, bad, 6, "'s3://raw/x/' is not registered")
    assert sorted(p.name for p in data.iterdir()) == ["notes.txt"]  # no catalog.db, issuer key, admin secret
