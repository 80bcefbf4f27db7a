"""Each answer the test doubles replay (``tests/recordings.py``) is what its peer's note recorded, word for word."""

from __future__ import annotations

import pytest

from tests.recordings import ALL, NOTES, ORIGINALS, POLARIS_UNSUPPORTED_DELEGATION, Recorded, note


@pytest.mark.parametrize("recorded", ALL, ids=lambda r: f"{r.peer}:{r.status}:{r.recorded_as[0][:30]}")
def test_a_replayed_answer_is_the_recorded_one(recorded: Recorded) -> None:
    text = note(recorded.peer)
    for words in recorded.recorded_as:
        assert words in text, f"{recorded.peer} does not record {words!r}"
    error = recorded.body.get("error")
    if isinstance(error, dict):  # an Iceberg ErrorModel: its type, message and code are the recorded ones
        assert f"`{error['type']}`" in text or f'"type":"{error["type"]}"' in text
        assert str(error["message"]) in text and error["code"] == recorded.status
        assert str(recorded.status) in text
    else:  # an OAuth error: its code and description
        assert f"`{error}`" in text and f"`{recorded.body['error_description']}`" in text


def test_polaris_says_illegal_argument_not_bad_request() -> None:
    """The answer the old double got wrong: Iceberg Java maps the type to java.lang.IllegalArgumentException."""
    assert POLARIS_UNSUPPORTED_DELEGATION.json() in note("polaris-1.4.1.md")
    assert "turns a 400 of type `IllegalArgumentException` into `java.lang.IllegalArgumentException`" in note(
        "polaris-1.4.1.md"
    )


@pytest.mark.parametrize("peer", sorted({r.peer for r in ALL}))
def test_the_repositorys_copy_is_the_note_itself(peer: str) -> None:
    """The copies in tests/fixtures/recordings are the verified notes, byte for byte (when the notes are here)."""
    original = ORIGINALS / peer
    if not original.is_file():
        pytest.skip(f"no original to compare with ({original}): a plain clone; the copy is what the suite reads")
    assert (NOTES / peer).read_bytes() == original.read_bytes()
