"""Rollout engines: `RolloutEngine` interface, the torch backend, and a lazily imported vLLM adapter."""
