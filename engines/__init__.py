"""Engines: turn a typed generation request into typed events, report load."""
