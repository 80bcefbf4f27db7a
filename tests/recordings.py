"""What real peers answer, as recorded on these machines (``tests/fixtures/recordings``, copies of
``../shared/notes``): test doubles replay these.

A double of Polaris or Lakekeeper that answers what we guess (``BadRequestException`` where Polaris says
``IllegalArgumentException``) lets a test pass while the real catalog fails, so the doubles' answers come
from here and ``tests/project/test_recordings.py`` checks each one against its recording, word for word.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the repository's copies (a plain clone has no ``../shared``); ``ORIGINALS``: where the notes themselves are
NOTES = ROOT / "tests" / "fixtures" / "recordings"
ORIGINALS = Path(os.environ.get("LAKESESSION_SHARED_DIR") or ROOT.parent / "shared") / "notes"


@dataclass(frozen=True)
class Recorded:
    """One answer of a real system: its status and body, and the words of the note that recorded it."""

    peer: str  # the note's file name
    status: int
    body: dict[str, object]
    recorded_as: tuple[str, ...]  # each appears verbatim in the note (line breaks read as spaces)

    def json(self) -> str:
        return json.dumps(self.body, separators=(",", ":"))


POLARIS = "polaris-1.4.1.md"
LAKEKEEPER = "lakekeeper-0.13.3.md"

POLARIS_UNSUPPORTED_DELEGATION = Recorded(
    POLARIS,
    400,
    {
        "error": {
            "message": "Unsupported access delegation mode: remote-signing",
            "type": "IllegalArgumentException",
            "code": 400,
        }
    },
    (
        '{"error":{"message":"Unsupported access delegation mode: remote-signing",'
        '"type":"IllegalArgumentException","code":400}}',
    ),
)
POLARIS_INVALID_SCOPE = Recorded(
    POLARIS,
    400,
    {"error": "invalid_scope", "error_description": "The scope is invalid"},
    ("OAuth error `invalid_scope`, description `The scope is invalid`", "scope=PRINCIPAL_ROLE:ALL"),
)
LAKEKEEPER_PROTECTED_OWNER = Recorded(
    LAKEKEEPER,
    403,
    {
        "error": {
            "message": "Property 'trino.run-as-owner' controls the view security model and may only be modified by "
            "the corresponding trusted engine using the exact configured property key",
            "type": "ProtectedPropertyModification",
            "code": 403,
        }
    },
    ("gets 403 `ProtectedPropertyModification`",),
)
LAKEKEEPER_NO_SUCH_TABLE = Recorded(
    LAKEKEEPER,
    404,
    {"error": {"message": "Error getting tabular from catalog", "type": "NoSuchTableException", "code": 404}},
    ('`NoSuchTableException`, "Error getting tabular from catalog"',),
)
# The note records the type and message; the status is the one Iceberg Java needs to raise the recorded
# org.apache.iceberg.exceptions.NoSuchWarehouseException (its config error handler maps only 404 to it).
LAKEKEEPER_NO_SUCH_WAREHOUSE = Recorded(
    LAKEKEEPER,
    404,
    {"error": {"message": "A warehouse 'nosuchwh' does not exist", "type": "NoSuchWarehouseException", "code": 404}},
    ("`NoSuchWarehouseException`, \"A warehouse 'nosuchwh' does not exist\"", "NoSuchWarehouseException` at the first"),
)
ALL = (
    POLARIS_UNSUPPORTED_DELEGATION,
    POLARIS_INVALID_SCOPE,
    LAKEKEEPER_PROTECTED_OWNER,
    LAKEKEEPER_NO_SUCH_TABLE,
    LAKEKEEPER_NO_SUCH_WAREHOUSE,
)


def note(peer: str) -> str:
    """A recording's note, its line breaks read as spaces; a missing note fails the test that needs it."""
    path = NOTES / peer
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the recorded answers of {peer} (tests/fixtures/recordings) are missing")
    return " ".join(path.read_text().split())
