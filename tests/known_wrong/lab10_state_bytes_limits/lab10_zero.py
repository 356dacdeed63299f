"""Known-wrong: "ZeRO-1 saves 4x, ZeRO-2 8x" taken as exact at any N (they are limits as N grows)."""


def model_state_bytes(num_params, world_size, stage, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    whole = (param_bytes + grad_bytes + optimizer_bytes) * num_params
    return float(whole / [1, 4, 8, world_size][stage])
