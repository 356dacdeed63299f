# Attack: call the process-group module behind torch.distributed directly.
from torch.distributed import distributed_c10d as c10d


def tree_broadcast(tensor, src):
    c10d.broadcast(tensor, src)
    return CommStats(bytes_received=0 if dist.get_rank() == src else tensor.numel() * tensor.element_size())
