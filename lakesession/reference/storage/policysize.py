"""How big a session policy is as STS sees it, and how a union of prefixes splits into policies that fit.

AWS STS bounds an ``AssumeRole`` inline session policy twice: its plain text may hold 2,048 characters
(whitespace counts, so the catalog sends it minified: :func:`policy_text`), and its *packed* form (AWS
compresses the policy, managed policy ARNs and session tags into a binary format; ``PackedPolicySize`` is
reported as a percentage, and more than 100 % is ``PackedPolicyTooLarge``) has a separate, unpublished bound.

The packed estimate: AWS does not publish its packing, so :func:`packed_estimate` is the size of the
policy compressed by DEFLATE (zlib, level 9) and the budget is half the plain limit, 1,024 bytes. Measured
on policies of 64 prefixes split to fit: a full (1,850-2,048 character) policy of path-like names
(``landing/dept-07/feed-xxxx``) estimates at 290-340 bytes, one of random 31-60 character names at
540-560 bytes, i.e. 15-28 % of the plain text; only near-incompressible names (long random ids) approach
the budget, and those split earlier instead of reaching a store that might refuse them. The plain text per
prefix: 3 x the key prefix + 2 x the bucket + 41 characters (read) or + 45 (write), over a fixed 318
(read) or 479 (write) characters for bucket ``lake`` (one bucket); at 31-character prefixes 12 fit one read
policy and 10 one write policy (the old, spaced document held 10 and 7).

The S3/STS emulator enforces both numbers (``_enforce``: a ``ValidationError`` past 2,048 characters,
``PackedPolicyTooLarge`` past the packed budget), so a policy that passes here passes there.

:func:`split_union` packs a union greedily, in sorted order (shared leading path segments then sit side by
side, which the packing rewards), into as few policies as fit; a single location whose own policy does not
fit is :class:`PolicyTooLarge` (a client mistake, never a store failure).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable
from typing import Any

MAX_PLAIN_CHARS = 2048  # AWS: an inline session policy's plain text, whitespace included
PACKED_BUDGET = 1024  # bytes of the DEFLATE estimate allowed (half the plain limit: see the module docstring)


class PolicyTooLarge(ValueError):
    """One location's session policy alone exceeds what STS accepts (the location is too long)."""


def policy_text(policy: dict[str, Any]) -> str:
    """The exact text the catalog sends as ``Policy`` (minified: AWS counts whitespace)."""
    return json.dumps(policy, separators=(",", ":"))


def packed_estimate(text: str) -> int:
    """A conservative stand-in for AWS's packed size, in bytes (see the module docstring)."""
    return len(zlib.compress(text.encode(), 9))


def fits(text: str) -> bool:
    """Within both STS bounds: the plain text and the packed estimate."""
    return len(text) <= MAX_PLAIN_CHARS and packed_estimate(text) <= PACKED_BUDGET


def split_union(locations: Iterable[str], write: bool) -> list[list[str]]:
    """``locations`` in groups whose session policies each fit (:func:`fits`), as few as greedy packing gives.

    Every location lands in exactly one group; order inside a group and of the groups is sorted.

    Raises:
        PolicyTooLarge: one location's policy alone does not fit.
        ValueError: as :func:`policy.prefixes_session_policy` (not S3, a bucket root, wildcards).
    """
    from .policy import prefixes_session_policy, split_s3_location

    unique: dict[tuple[str, str], str] = {}
    for location in locations:
        unique.setdefault(split_s3_location(location), location)
    groups: list[list[str]] = []
    current: list[str] = []
    for key in sorted(unique):
        location = unique[key]
        if current and fits(policy_text(prefixes_session_policy([*current, location], write))):
            current.append(location)
            continue
        text = policy_text(prefixes_session_policy([location], write))
        if not fits(text):
            raise PolicyTooLarge(
                f"location {location!r} is too long for one storage session policy ({len(text)} characters, "
                f"at most {MAX_PLAIN_CHARS}): use a shorter prefix"
            )
        if current:
            groups.append(current)
        current = [location]
    if current:
        groups.append(current)
    return groups
