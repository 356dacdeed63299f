"""Known-wrong: writes the checkpoint in place; a crash mid-write leaves a torn file and no good one."""


def atomic_save(data, path):
    with open(path, "wb") as f:
        f.write(data)
