"""Benchmarks against the reference RLM (`python -m benchmarks.run`)."""
