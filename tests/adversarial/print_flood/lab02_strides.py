# Not an attack on the score: 40 MB of output from a correct answer must neither hang nor cost points.
_slice_view = slice_view


def slice_view(shape, strides, offset, dim, start, stop, step):
    print("noise " * 100_000)
    return _slice_view(shape, strides, offset, dim, start, stop, step)
