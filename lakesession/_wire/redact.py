"""Keep storage credentials out of botocore's DEBUG logging (neutral ground: catalog and client half use it).

botocore logs, at DEBUG, whole responses (``botocore.parsers``: an STS ``AssumeRole`` body
carries the new secret key and session token), request headers and bodies (``botocore.endpoint``:
``X-Amz-Security-Token``; an ``AssumeRoleWithWebIdentity``'s ``WebIdentityToken``) and canonical
requests (``botocore.auth``). ``RedactCredentials`` replaces those values with ``***`` and keeps the
record, so DEBUG logging stays useful.
"""

from __future__ import annotations

import logging
import re

_CREDENTIAL_FIELDS = re.compile(
    r"(<(SecretAccessKey|SessionToken)>)[^<]*(</\2>)"  # STS query/XML responses
    r"|(\\?[\"'](?:SecretAccessKey|SessionToken|WebIdentityToken)\\?[\"']\s*:\s*\\?[\"'])[^\"'\\]*"  # JSON, reprs
    r"|((?i:x-amz-security-token)\\?[\"']?\s*[:=,]\s*(?:b?\\?[\"'])?|WebIdentityToken=)[^\s\"'&\\,})]+"  # headers, queries
)
#: loggers whose DEBUG records carry response bodies, request headers or canonical requests: botocore's, and
#: moto's request authorization (the embedded S3/STS emulator logs each request's headers)
_BOTOCORE_LOGGERS = (
    "botocore.parsers",
    "botocore.endpoint",
    "botocore.auth",
    "botocore.hooks",
    "botocore.awsrequest",
    "moto.iam.access_control",
)


def _redact(match: re.Match[str]) -> str:
    if match.group(1):
        return f"{match.group(1)}***{match.group(3)}"
    return f"{match.group(4) or match.group(5)}***"


class RedactCredentials(logging.Filter):
    """Replaces secret keys and session tokens in a record's message with ``***`` (the record is kept)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # a record that cannot format is not ours to fix
            return True
        redacted = _CREDENTIAL_FIELDS.sub(_redact, text)
        if redacted != text:
            record.msg, record.args = redacted, ()
        return True


def quiet_botocore_bodies() -> None:
    """Redact credentials in botocore's DEBUG logging of bodies, headers and canonical requests.

    Idempotent; it applies to every botocore client in the process (the vending and signing
    clients, and any engine-side client using vended credentials).
    """
    for name in _BOTOCORE_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactCredentials) for f in logger.filters):
            logger.addFilter(RedactCredentials())
