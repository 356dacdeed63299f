"""Known-wrong: buckets filled in forward (registration) order, not the order backward makes gradients."""
from solutions.lab06_data_parallel import *  # noqa: F401,F403


def bucket_indices(param_bytes, param_dtypes, cap_bytes):
    closed, open_ = [], {}
    for i in range(len(param_bytes)):  # BUG: forward order
        members, size = open_.get(param_dtypes[i], ([], 0))
        members, size = members + [i], size + param_bytes[i]
        if size >= cap_bytes:
            closed.append(members)
            open_.pop(param_dtypes[i], None)
        else:
            open_[param_dtypes[i]] = (members, size)
    return closed + [members for members, _ in open_.values()]
