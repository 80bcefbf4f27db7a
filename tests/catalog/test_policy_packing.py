"""Session policies packed and split for STS's size bounds (issue #40, B1): every produced policy is at most
2,048 characters plain and under the packed estimate's budget, and covers exactly its granted prefixes
(evaluated with the same IAM evaluator the emulator enforces with); the emulator refuses what AWS would.
"""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from botocore.exceptions import ClientError

from lakesession.reference.storage import S3Emulator
from lakesession.reference.storage.policy import evaluate, prefixes_session_policy
from lakesession.reference.storage.policysize import (
    MAX_PLAIN_CHARS,
    PACKED_BUDGET,
    PolicyTooLarge,
    fits,
    packed_estimate,
    policy_text,
    split_union,
)

B = "lake-pack"
#: 64 realistic key prefixes of 31..60 characters, some sharing leading segments, some not
PREFIXES = [
    (f"landing/dept-{i:02d}/feed-" if i % 2 else f"raw/{hashlib.sha1(str(i).encode()).hexdigest()}/")
    .ljust(31 + (i * 29) // 63, "q")[: 31 + (i * 29) // 63]
    .rstrip("/")
    + ("" if i % 2 else "z")
    for i in range(64)
]


def _allowed(policy: dict[str, object], action: str, resource: str, **ctx: str) -> bool:
    return evaluate([policy], action, resource, ctx) == "Allow"


@pytest.mark.parametrize("write", [False, True])
def test_sixty_four_prefixes_split_into_policies_that_fit_and_cover_exactly_their_group(write: bool) -> None:
    assert len(set(PREFIXES)) == 64 and all(31 <= len(p) <= 61 for p in PREFIXES)
    locations = [f"s3://{B}/{p}/" for p in PREFIXES]
    groups = split_union(locations, write)
    assert sorted(loc for g in groups for loc in g) == sorted(locations)  # each prefix in exactly one group
    assert 1 < len(groups) <= 12
    for group in groups:
        policy = prefixes_session_policy(group, write)
        text = policy_text(policy)
        assert text == json.dumps(policy, separators=(",", ":")) and " " not in text
        assert len(text) <= MAX_PLAIN_CHARS and packed_estimate(text) <= PACKED_BUDGET and fits(text)
        for p in PREFIXES:
            mine = f"s3://{B}/{p}/" in group
            arn = f"arn:aws:s3:::{B}/{p}"
            assert _allowed(policy, "s3:GetObject", f"{arn}/part-0.parquet") == mine
            assert _allowed(policy, "s3:GetObject", arn) == mine  # the directory key (S3A's HEAD)
            assert _allowed(policy, "s3:ListBucket", f"arn:aws:s3:::{B}", **{"s3:prefix": f"{p}/"}) == mine
            assert _allowed(policy, "s3:PutObject", f"{arn}/new.parquet") == (mine and write)
            assert not _allowed(policy, "s3:PutObject", arn)  # never a file shadowing the directory
            assert p.count("/") >= 1
            assert not _allowed(policy, "s3:GetObject", f"{arn}_archive/x")  # the sibling
            assert not _allowed(policy, "s3:GetObject", f"{arn}_archive")
            assert not _allowed(policy, "s3:ListBucket", f"arn:aws:s3:::{B}", **{"s3:prefix": f"{p}_archive/"})
            assert not _allowed(policy, "s3:ListBucket", f"arn:aws:s3:::{B}", **{"s3:prefix": p})
        assert not _allowed(policy, "s3:ListBucket", f"arn:aws:s3:::{B}")  # the bucket root
        assert not _allowed(policy, "s3:ListBucket", f"arn:aws:s3:::{B}", **{"s3:prefix": ""})
        assert not _allowed(policy, "s3:GetObject", f"arn:aws:s3:::{B}/landing/x")  # a shared parent segment
        assert not _allowed(policy, "s3:ListBucket", f"arn:aws:s3:::{B}", **{"s3:prefix": "landing/"})
        assert not _allowed(policy, "s3:ListBucketMultipartUploads", f"arn:aws:s3:::{B}")


def test_each_prefix_is_named_three_times_and_the_text_is_minified() -> None:
    for write in (False, True):
        text = policy_text(prefixes_session_policy([f"s3://{B}/{p}" for p in PREFIXES[:5]], write))
        for p in PREFIXES[:5]:
            assert text.count(p) == 3, (write, p)  # its /* objects, its bare key, its listing condition
        assert '"Sid"' not in text and ", " not in text and ": " not in text


def test_a_single_location_too_long_for_any_policy_is_a_policy_too_large() -> None:
    with pytest.raises(PolicyTooLarge) as caught:
        split_union([f"s3://{B}/ok/one", f"s3://{B}/" + "k" * 700], write=False)
    assert "at most 2048" in str(caught.value)
    assert split_union([f"s3://{B}/" + "k" * 450], write=True) == [[f"s3://{B}/" + "k" * 450]]


def test_the_emulator_refuses_what_sts_refuses_plain_and_packed() -> None:
    with S3Emulator() as emu:
        emu.create_bucket(B)
        group = split_union([f"s3://{B}/{p}" for p in PREFIXES], write=True)[0]
        emu.assume(policy_text(prefixes_session_policy(group, True)))  # a produced policy is accepted
        too_long = prefixes_session_policy([f"s3://{B}/{p}" for p in PREFIXES[:20]], write=True)
        with pytest.raises(ClientError) as caught:
            emu.assume(policy_text(too_long))
        assert "2048" in str(caught.value)
        # distinct random resources: under 2,048 characters, but nearly incompressible
        noise = [
            base64.b64encode(b"".join(hashlib.sha512(f"{i}-{j}".encode()).digest() for j in range(4))).decode()[:330]
            for i in range(5)
        ]
        dense = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": "s3:GetObject", "Resource": [f"arn:aws:s3:::{B}/{n}" for n in noise]}
            ],
        }
        text = policy_text(dense)
        assert len(text) <= MAX_PLAIN_CHARS and packed_estimate(text) > PACKED_BUDGET
        with pytest.raises(ClientError) as caught:
            emu.assume(text)
        assert caught.value.response["Error"]["Code"] == "PackedPolicyTooLarge"
