"""A discrete-event model of vLLM engines sharing one GPU, driving the real policy."""
