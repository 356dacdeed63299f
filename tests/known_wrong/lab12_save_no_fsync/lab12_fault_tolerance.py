"""Known-wrong: temp file + rename, but nothing is fsync-ed. Every kill leaves the old file or the
new one (a killed process's writes are in the page cache); a power cut could leave neither."""
import os
import tempfile


def atomic_save(data, path):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
