"""Deployment helpers for agui-relay (local Apache Kafka broker)."""
