"""agui-relay services: gatekeeper, producer workers, consumer service, CLI."""
