"""Gateway: the OpenAI-compatible HTTP front of SpecGate."""
