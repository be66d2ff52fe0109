"""The Standard Webhooks signature, as the official `openai` client verifies it
(`OpenAI(webhook_secret=...).webhooks.unwrap(body, headers)`): the secret is `whsec_`
and base64 of random bytes; the signature is base64 HMAC-SHA256 of
`{webhook-id}.{webhook-timestamp}.{body}`, sent as `v1,<signature>`."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def signed_headers(secret: str, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers of one attempt; `timestamp` is the attempt's, so that a retry a
    day later is still inside a receiver's replay tolerance."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{message_id}.{timestamp}.".encode() + body
    signature = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return {"webhook-id": message_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": f"v1,{signature}"}
