"""ZeroMQ transport: message codec, tensors as raw frames, hub and actor endpoints."""
