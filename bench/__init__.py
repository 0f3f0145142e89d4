"""Benchmark scripts: they print figures; they are not tests."""
