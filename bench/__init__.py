"""Benchmarks: `python -m bench.<name>` prints a table and writes bench/results/<name>.json."""
