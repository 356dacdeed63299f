"""Lab 02: a small model of a strided tensor (`labkit.strides.view`), the notebook's
check-your-work pictures (`labkit.strides.lab`) and its drawings (`labkit.strides.draw`)."""
from labkit.strides.view import (StridedView, ViewError, broadcast_shapes, contiguous_strides, infer_shape,
                                 is_contiguous, view_strides)

__all__ = [
    "StridedView", "ViewError", "contiguous_strides", "is_contiguous", "view_strides",
    "infer_shape", "broadcast_shapes",
]
