"""A real single-node Apache Kafka broker from Maven Central jars (see launcher.py)."""
