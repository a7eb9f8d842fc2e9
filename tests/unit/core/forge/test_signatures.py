"""Delivery signatures (pure): GitHub's sha256= HMAC, Gitea's bare hex HMAC, GitLab's token; constant-time,
and a missing, malformed or other forge's header is refused."""

import hashlib
import hmac

import pytest

from harness_operator.core.forge.signatures import verify_delivery

SECRET = b"s3cret-webhook"
BODY = b'{"action": "created", "comment": {"body": "/agent fix it"}}'
HEX = hmac.new(SECRET, BODY, hashlib.sha256).hexdigest()


@pytest.mark.parametrize(
    ("forge", "headers"),
    [
        ("github", {"X-Hub-Signature-256": f"sha256={HEX}"}),
        ("github", {"x-hub-signature-256": f"sha256={HEX}"}),  # servers lower-case header names
        ("gitea", {"X-Gitea-Signature": HEX}),
        ("gitea", {"X-GITEA-SIGNATURE": HEX.upper()}),
        ("gitlab", {"X-Gitlab-Token": SECRET.decode()}),
    ],
)
def test_a_signed_delivery_is_accepted(forge: str, headers: dict[str, str]) -> None:
    assert verify_delivery(forge, headers, BODY, SECRET)


@pytest.mark.parametrize(
    ("forge", "headers"),
    [
        ("github", {}),
        ("github", {"X-Hub-Signature-256": HEX}),  # no sha256= prefix
        ("github", {"X-Hub-Signature": "sha1=" + hmac.new(SECRET, BODY, hashlib.sha1).hexdigest()}),
        ("github", {"X-Gitea-Signature": HEX}),  # another forge's header
        ("gitea", {"X-Hub-Signature-256": f"sha256={HEX}"}),
        ("gitea", {"X-Gitea-Signature": ""}),
        ("gitea", {"X-Gitea-Signature": HEX[:-1] + ("0" if HEX[-1] != "0" else "1")}),
        ("gitea", {"X-Gitea-Signature": "é" * 64}),  # not hex, not ASCII: refused, never raises
        ("gitlab", {}),
        ("gitlab", {"X-Gitlab-Token": "s3cret-webhoo"}),
        ("gitlab", {"X-Gitlab-Token": HEX}),
        ("bitbucket", {"X-Hub-Signature-256": f"sha256={HEX}"}),
    ],
)
def test_a_missing_wrong_or_foreign_signature_is_refused(forge: str, headers: dict[str, str]) -> None:
    assert not verify_delivery(forge, headers, BODY, SECRET)


@pytest.mark.parametrize("forge", ["github", "gitea"])
def test_the_signature_covers_the_body(forge: str) -> None:
    header = {"github": {"X-Hub-Signature-256": f"sha256={HEX}"}, "gitea": {"X-Gitea-Signature": HEX}}[forge]
    assert not verify_delivery(forge, header, BODY.replace(b"fix", b"rm -rf"), SECRET)
    assert not verify_delivery(forge, header, BODY, b"another-secret")


def test_an_empty_secret_verifies_nothing() -> None:
    empty = hmac.new(b"", BODY, hashlib.sha256).hexdigest()
    assert not verify_delivery("gitea", {"X-Gitea-Signature": empty}, BODY, b"")
    assert not verify_delivery("gitlab", {"X-Gitlab-Token": ""}, BODY, b"")
