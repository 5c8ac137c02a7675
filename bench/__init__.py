"""Benchmarks: ``python -m bench [NAME ...] [--record]`` (protocol: docs/benchmarks.md)."""
