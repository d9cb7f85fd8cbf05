"""Multi-agent workflows: roles, prompts, tree sampling. One workflow per task family, one turn loop
(`tree.py`) for all of them; callers need only `base` (types) and `factory` (`make_workflow`)."""
