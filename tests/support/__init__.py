"""Shared test utilities (scripted OpenAI-compatible server, etc.)."""
