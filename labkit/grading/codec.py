"""Data-only encoding between the judge and a sandboxed worker (no pickle anywhere).

A message is ``dumps(value)``: an 8-byte little-endian header length, a JSON
header, then raw blobs (array and tensor bytes). ``loads`` rebuilds only plain
data: None, bool, int, float, str, list, tuple, dict, Fraction, complex,
numpy arrays, torch tensors (CPU), and `Record` (what a dataclass or named
tuple becomes: its type name and fields, readable as attributes). Nothing the
sender names is imported or called on decoding, so a lying worker can only
send wrong *data*. Sizes are checked against the header before use.
"""
from __future__ import annotations

import dataclasses
import json
import struct
from fractions import Fraction

import numpy as np

MAX_DEPTH = 64
_HEAD = struct.Struct("<Q")

# dtype names allowed on the wire (numpy and torch); anything else is refused.
_NUMPY_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64", "complex64", "complex128"}
_TORCH_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16",
                 "float32", "float64", "complex64", "complex128"}


class CodecError(ValueError):
    """A value that cannot be sent, or a message that is not well formed."""


@dataclasses.dataclass(frozen=True)
class Record:
    """A dataclass or named tuple from the other side: ``type`` (its class name) and ``fields``.

    Fields read as attributes (``stats.bytes_sent``); a named tuple's fields
    also unpack in order (``Action(*record)``).
    """

    type: str
    fields: dict
    ordered: bool = False  # a named tuple: iterable in field order

    def __getattr__(self, name):
        fields = object.__getattribute__(self, "fields")
        if name in fields:
            return fields[name]
        raise AttributeError(f"{object.__getattribute__(self, 'type')} has no field {name!r}")

    def __iter__(self):
        if not self.ordered:
            raise TypeError(f"{self.type} is not a tuple")
        return iter(self.fields.values())

    def __repr__(self):
        inner = ", ".join(f"{k}={v!r}" for k, v in self.fields.items())
        return f"{self.type}({inner})"


# ------------------------------------------------------------------ encode
def dumps(value) -> bytes:
    """Encode ``value`` (see module docstring); CodecError for anything else."""
    blobs: list[bytes] = []
    tree = _enc(value, blobs, 0)
    head = json.dumps({"v": tree, "blobs": [len(b) for b in blobs]}).encode()
    return _HEAD.pack(len(head)) + head + b"".join(blobs)


def _enc(v, blobs, depth):
    if depth > MAX_DEPTH:
        raise CodecError("value nested too deeply to send")
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return v if abs(v) < 2 ** 53 else {"t": "bigint", "v": str(v)}
    if isinstance(v, float):
        return v
    if isinstance(v, np.generic):
        return _enc(v.item(), blobs, depth)
    if isinstance(v, Fraction):
        return {"t": "frac", "v": [str(v.numerator), str(v.denominator)]}
    if isinstance(v, complex):
        return {"t": "complex", "v": [v.real, v.imag]}
    if isinstance(v, np.ndarray):
        if v.dtype.name not in _NUMPY_DTYPES:
            raise CodecError(f"numpy dtype {v.dtype} cannot be sent")
        blobs.append(np.ascontiguousarray(v).tobytes())
        return {"t": "nd", "dtype": v.dtype.name, "shape": list(v.shape), "b": len(blobs) - 1}
    if _is_tensor(v):
        return _enc_tensor(v, blobs)
    if isinstance(v, tuple) and hasattr(v, "_fields"):
        return {"t": "rec", "type": type(v).__name__, "ordered": True,
                "v": [[k, _enc(getattr(v, k), blobs, depth + 1)] for k in v._fields]}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        if isinstance(v, Record):
            return {"t": "rec", "type": v.type, "ordered": v.ordered,
                    "v": [[k, _enc(x, blobs, depth + 1)] for k, x in v.fields.items()]}
        return {"t": "rec", "type": type(v).__name__, "ordered": False,
                "v": [[f.name, _enc(getattr(v, f.name), blobs, depth + 1)] for f in dataclasses.fields(v)]}
    if isinstance(v, (list, tuple)):
        return {"t": "tuple" if isinstance(v, tuple) else "list", "v": [_enc(x, blobs, depth + 1) for x in v]}
    if isinstance(v, dict):
        return {"t": "dict", "v": [[_enc(k, blobs, depth + 1), _enc(x, blobs, depth + 1)] for k, x in v.items()]}
    raise CodecError(f"a value of type {type(v).__name__} cannot be sent to the grader; "
                     "return plain data (numbers, tuples, lists, dicts, arrays, tensors, dataclasses)")


def _is_tensor(v) -> bool:
    torch = _torch()
    return torch is not None and isinstance(v, torch.Tensor)


def _torch():
    import sys

    return sys.modules.get("torch")


def _enc_tensor(t, blobs):
    name = str(t.dtype).removeprefix("torch.")
    if name not in _TORCH_DTYPES:
        raise CodecError(f"tensor dtype {t.dtype} cannot be sent")
    t = t.detach().to("cpu").contiguous()
    raw = t.reshape(-1).view(_torch().uint8) if t.numel() else t.reshape(-1)
    blobs.append(raw.numpy().tobytes() if t.numel() else b"")
    return {"t": "tensor", "dtype": name, "shape": list(t.shape), "b": len(blobs) - 1}


# ------------------------------------------------------------------ decode
def loads(data: bytes):
    """Decode a message made by `dumps`; CodecError if it is malformed."""
    try:
        if len(data) < _HEAD.size:
            raise CodecError("message too short")
        (n,) = _HEAD.unpack_from(data)
        if n > len(data) - _HEAD.size:
            raise CodecError("header length exceeds the message")
        head = json.loads(data[_HEAD.size:_HEAD.size + n])
        sizes = head["blobs"]
        if not isinstance(sizes, list) or not all(isinstance(s, int) and s >= 0 for s in sizes):
            raise CodecError("bad blob table")
        blobs, at = [], _HEAD.size + n
        for s in sizes:
            if at + s > len(data):
                raise CodecError("blob runs past the end of the message")
            blobs.append(data[at:at + s])
            at += s
        return _dec(head["v"], blobs, 0)
    except CodecError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, RecursionError, OverflowError) as e:
        raise CodecError(f"malformed message ({type(e).__name__}: {str(e)[:200]})") from None


def _dec(v, blobs, depth):
    if depth > MAX_DEPTH:
        raise CodecError("message nested too deeply")
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list):
        raise CodecError("bare list in message")
    t = v["t"]
    if t == "list":
        return [_dec(x, blobs, depth + 1) for x in v["v"]]
    if t == "tuple":
        return tuple(_dec(x, blobs, depth + 1) for x in v["v"])
    if t == "dict":
        return {_hashable(_dec(k, blobs, depth + 1)): _dec(x, blobs, depth + 1) for k, x in v["v"]}
    if t == "bigint":
        return int(v["v"][:5000])
    if t == "frac":
        return Fraction(int(v["v"][0][:5000]), int(v["v"][1][:5000]))
    if t == "complex":
        return complex(float(v["v"][0]), float(v["v"][1]))
    if t == "rec":
        fields = {str(k): _dec(x, blobs, depth + 1) for k, x in v["v"]}
        return Record(str(v["type"])[:100], fields, bool(v["ordered"]))
    if t == "nd":
        return _dec_array(v, blobs)
    if t == "tensor":
        return _dec_tensor(v, blobs)
    raise CodecError(f"unknown tag {str(t)[:40]!r}")


def _hashable(k):
    if isinstance(k, list):
        raise CodecError("a list cannot be a dict key")
    return k


def _shape(v) -> tuple[int, ...]:
    shape = tuple(v["shape"])
    if len(shape) > 32 or not all(isinstance(d, int) and 0 <= d for d in shape):
        raise CodecError(f"bad shape {shape!r}")
    return shape


def _dec_array(v, blobs):
    dtype, shape, blob = v["dtype"], _shape(v), blobs[v["b"]]
    if dtype not in _NUMPY_DTYPES:
        raise CodecError(f"numpy dtype {dtype!r} not allowed")
    dt = np.dtype(dtype)
    if len(blob) != int(np.prod(shape, dtype=np.int64)) * dt.itemsize:
        raise CodecError("array size does not match its shape")
    return np.frombuffer(blob, dtype=dt).reshape(shape).copy()


def _dec_tensor(v, blobs):
    import torch

    dtype, shape, blob = v["dtype"], _shape(v), blobs[v["b"]]
    if dtype not in _TORCH_DTYPES:
        raise CodecError(f"tensor dtype {dtype!r} not allowed")
    dt = getattr(torch, dtype)
    numel = int(np.prod(shape, dtype=np.int64))
    if len(blob) != numel * torch.empty((), dtype=dt).element_size():
        raise CodecError("tensor size does not match its shape")
    if numel == 0:
        return torch.empty(shape, dtype=dt)
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8).view(dt).reshape(shape).clone()
