"""`atgrpo-bench gpu`: the first check on a machine with a GPU (docs/gpus.md).

`suite` is what the command runs (`run(quick, device=, vllm=)`); the parts that need a process of
their own are modules run with `python -m`: `learner_scale` (one case per process: its own peak
memory and process group), `ranks` (one rank under torchrun) and `vllm_checks` (vLLM measures a
clean GPU). Nothing is imported here: each child imports only what it runs, so none starts CUDA
or vLLM before it means to.
"""
