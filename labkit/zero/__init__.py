"""ZeRO and FSDP (Lab 10): shard the model states over the data-parallel ranks.

    formulas.py   model_state_bytes: per-rank bytes of parameters, gradients and optimizer states
"""
