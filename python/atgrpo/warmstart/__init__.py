"""Supervised warm start before RL: solver demonstrations and the SFT loop that trains on them."""
