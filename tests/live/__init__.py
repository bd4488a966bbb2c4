"""The live tier: backthink against a real model served on loopback (`make test-live`)."""
