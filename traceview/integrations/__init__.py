"""Hooks for the frameworks that run training loops: a Lightning Callback (`lightning`), a Hugging Face
TrainerCallback (`hf`) and a TorchTitan trace post-processor (`torchtitan`). Each module imports its framework
only when it is imported itself; this package imports none."""
