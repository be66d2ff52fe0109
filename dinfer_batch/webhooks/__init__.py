"""Signed webhooks: endpoints per owner, events recorded when jobs end, and the sender that
delivers them (docs/adr/013-webhooks-and-retention.md)."""
