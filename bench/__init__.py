"""Benchmarks: ``python -m bench [NAME ...] [--record]`` (see shared/spec/BENCHMARKS.md)."""
