"""Known-wrong: the data is flushed and fsync-ed before the rename, but the folder is not fsync-ed
after it: after a power cut the folder may still name the old file."""
import os
import tempfile


def atomic_save(data, path):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
