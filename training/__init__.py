"""Train EAGLE-3 and DFlash drafters for the served model (``specgate train-drafter``).

Stages, each resumable and saving its output under the work directory:
prompts -> the target's own greedy answers (vLLM) -> target hidden states ->
training -> a checkpoint vLLM loads as ``speculative_config={"method", "model"}``.
"""
