"""Learner side: loss, batching, backends (torch, DeepSpeed), the hub and the `atgrpo-learner` entry point."""
