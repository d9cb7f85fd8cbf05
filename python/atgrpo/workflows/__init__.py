"""Multi-agent workflows: roles, prompts, tree sampling. One workflow per task family."""
