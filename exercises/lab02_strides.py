"""Lab 02 exercises: strided views as (shape, strides, offset), all counted in elements.

Your work: replace each ``raise NotImplementedError`` with code (its hint names the idea and the API).

Element [i0, i1, ...] of a view is at storage position offset + sum(i_d * strides[d]).
Shapes and strides are tuples of ints; the functions return tuples.
"""


def slice_view(shape, strides, offset, dim, start, stop, step):
    """(shape, strides, offset) of ``t[..., start:stop:step, ...]`` on dimension ``dim``.

    ``start``, ``stop`` >= 0 and ``step`` >= 1; like Python, ``start`` and ``stop``
    larger than the size are clamped to it, and a stop before start gives length 0.
    """
    raise NotImplementedError("hint: clamp start and stop to the size as Python's slices do; the length is a ceiling division by step; only this dimension's size, its stride and the offset change.")


def permute_view(shape, strides, offset, dims):
    """(shape, strides, offset) of ``t.permute(dims)``: new dimension i is old dimension dims[i]."""
    raise NotImplementedError("hint: a permutation only reorders the (size, stride) pairs; the storage and the offset stay.")


def is_contiguous(shape, strides):
    """True when torch's ``is_contiguous()`` would be: row-major order after ignoring
    size-1 dimensions (their stride does not matter); a tensor with no elements is contiguous."""
    raise NotImplementedError("hint: walk the dimensions from the last, skipping size-1 ones: each stride must be the product of the sizes to its right.")


def view_strides(shape, strides, new_shape):
    """Strides of ``t.view(new_shape)``, or None where torch's view would raise.

    ``new_shape`` has the same number of elements (>= 1) and no -1. Torch's rule:
    walk the old dimensions from the last and group them into runs that are
    contiguous with each other. Dimension d-1 continues the run of d when it has
    size 1, or when stride[d-1] == b * n, with b the run's innermost stride (the
    stride of its last dimension) and n the run's element count so far (for two
    neighbours without size-1 dimensions: stride[d-1] == stride[d] * shape[d]).
    A view exists when every new dimension lies inside one run.

    Strides: the runs take the new dimensions from the right, each run as many as
    multiply to its element count plus the size-1 ones just left of them; a new
    dimension's stride is its run's b times the product of the new sizes to its
    right in that run. So a new size-1 dimension between two runs belongs to the
    run on its right (b times that run's element count), a trailing one gets the
    innermost run's b, a leading one the outermost run's b times its element
    count; a 0-d tensor gives all 1. E.g. shape (2, 3, 4), strides (12, 4, 1) viewed as
    (2, 1, 3, 4) gives (12, 12, 4, 1); shape (4, 3), strides (1, 4) (a transpose)
    viewed as (4, 3, 1) gives (1, 4, 4), as (4, 1, 3) gives (1, 12, 4) and as
    (1, 4, 3) gives (4, 1, 4).
    """
    raise NotImplementedError("hint: group the old dimensions into contiguous runs from the right (a run's base stride times its element count so far); hand each run the new dimensions whose sizes multiply to its count; return None when a new dimension would straddle two runs.")
