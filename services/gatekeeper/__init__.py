"""Gatekeeper service: decides which interrupt responses are admitted."""
