"""The untrusted side of grading: ``python -m labkit.grading.worker REPLY_FD``.

Runs inside the sandbox (see `labkit.grading.sandbox`). Reads framed requests
(`labkit.grading.codec`) from stdin and writes one framed reply per request to
file descriptor REPLY_FD. Requests:

    {"op": "load", "path": ..., "name": "lab05_collectives", "references": [...], "others": {...} or None}
    {"op": "call", "fn": "cache_tiled", "args": [...], "kwargs": {...}}
    {"op": "harness", "fn": "lab05_collective", "args": [...]}

A reply is ``{"ok": value}`` or ``{"raised": {"type", "bases", "message", "where"}}``.
Everything here runs next to the submission's code and can be tampered with
by it; the judge treats replies as claims to check, never as verdicts.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import struct
import sys
import traceback

from labkit.grading import codec

MAX_MESSAGE = 1 << 20       # bytes of one request (requests are small)
_FRAME = struct.Struct("<Q")

_module = None
_path = None


def _read_exact(stream, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def read_frame(stream, limit: int) -> bytes:
    (n,) = _FRAME.unpack(_read_exact(stream, _FRAME.size))
    if n > limit:
        raise codec.CodecError(f"message of {n} bytes exceeds {limit}")
    return _read_exact(stream, n)


def write_frame(fd: int, data: bytes) -> None:
    view = memoryview(_FRAME.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def forbidden(path: str):
    def refuse(*args, **kwargs):
        raise RuntimeError(f"{path} is labkit's reference implementation of a graded exercise; "
                           "graded code must not call it")
    refuse.__name__ = path.rsplit(".", 1)[-1]
    return refuse


def poison(references) -> None:
    """Replace each reference implementation, wherever a labkit module holds it, by `forbidden`."""
    for path in references:
        mod_name, attr = path.rsplit(".", 1)
        original = getattr(importlib.import_module(mod_name), attr)
        stub = forbidden(path)
        for name, mod in list(sys.modules.items()):
            if name.split(".")[0] == "labkit" and mod is not None:
                for key, value in list(vars(mod).items()):
                    if value is original:
                        setattr(mod, key, stub)


def _import_file(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load(path: str, name: str, references, others: dict | None = None) -> None:
    """Import the submission ``path`` as module ``name`` with labkit's references poisoned. With
    ``others`` ({"source": text, "names": [...], "exercise": name}) the submission's definitions of those names — the
    lab's other exercises — are replaced by the ones in ``source`` (the reference answers, with the
    graded exercise a stub: see `labkit.grading.generate.render_except`), so that what is graded
    here never runs the learner's other exercises."""
    global _module, _path
    import labkit  # noqa: F401  (sets TRITON_INTERPRET on CPU before any kernel is defined)

    poison(references)
    module = _import_file(path, name)
    if others:
        import tempfile

        # a file, not exec: Triton reads a kernel's source from it. It holds no answer to this exercise.
        folder = tempfile.mkdtemp(prefix="labkit-others-")
        other_path = os.path.join(folder, f"other_exercises_{name}.py")
        with open(other_path, "w") as f:
            f.write(others["source"])
        other = _import_file(other_path, f"_other_exercises_{name}")
        for n in others["names"]:
            setattr(module, n, getattr(other, n))
        if hasattr(module, others["exercise"]):   # and they call the learner's answer to this one
            setattr(other, others["exercise"], getattr(module, others["exercise"]))
    _module, _path = module, path


def handle(request: dict):
    op = request.get("op")
    if op == "load":
        load(request["path"], request["name"], request.get("references", ()), request.get("others"))
        return None
    if _module is None:
        raise RuntimeError("no submission loaded")
    args, kwargs = request.get("args", ()), request.get("kwargs", {})
    if op == "call":
        fn = getattr(_module, request["fn"], None)
        if fn is None:
            raise AttributeError(f"{os.path.basename(_path)} defines no {request['fn']}")
        return fn(*args, **kwargs)
    if op == "harness":
        from labkit.grading import harness

        return getattr(harness, request["fn"])(_module, *args, **kwargs)
    raise ValueError(f"unknown op {op!r}")


def describe(e: BaseException) -> dict:
    """What the judge learns of an exception: its class names, message, and the submission's line."""
    bases = [c.__name__ for c in type(e).__mro__ if c.__module__ == "builtins"]
    where = ""
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        if _path and frame.filename == _path:
            where = f"{os.path.basename(_path)}:{frame.lineno}"
            break
    return {"type": type(e).__name__, "bases": bases, "message": str(e)[:2000], "where": where}


def main(argv: list[str]) -> int:
    reply_fd = int(argv[0])
    requests = sys.stdin.buffer
    sys.stdin = open(os.devnull)   # the submission reads nothing of the protocol by accident
    while True:
        try:
            request = codec.loads(read_frame(requests, MAX_MESSAGE))
        except EOFError:
            return 0
        try:
            reply = {"ok": handle(request)}
            data = codec.dumps(reply)
        except BaseException as e:  # noqa: BLE001 - the submission may raise anything, even SystemExit
            data = codec.dumps({"raised": describe(e)})
        sys.stdout.flush()
        sys.stderr.flush()
        write_frame(reply_fd, data)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
