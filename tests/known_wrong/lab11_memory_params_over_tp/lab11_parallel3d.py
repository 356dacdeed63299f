"""Known-wrong: "M_model/tp + M_act/pp": parameters split by tp only (pipeline stages hold different
layers, so they split by tp·pp), and activations by pp (under 1F1B the first stage keeps min(m, pp)
micro-batches of l/pp layers: about l layers' worth, whatever pp is)."""


def fits_in_memory(num_params, layers, activation_bytes_per_layer, dp, tp, pp, micro_batches, zero_stage,
                   memory_bytes):
    psi = num_params / tp
    sharded = {0: 0, 1: 12, 2: 14, 3: 16}[zero_stage]
    states = (16 - sharded) * psi + sharded * psi / dp
    needed = states + layers * activation_bytes_per_layer / pp
    return needed <= memory_bytes, float(needed)
