"""Policies: decide which decoding mode serves a request, from typed inputs."""
