# Attack: replace the Triton kernel by a plain object whose "launch" computes in torch.
class _FakeKernel:
    def __getitem__(self, grid):
        def run(x, y, out, n, BLOCK):
            out.copy_(x + y)
        return run


add_kernel = _FakeKernel()
