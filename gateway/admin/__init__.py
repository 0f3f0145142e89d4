"""Operator API: read and tune the live policy."""
