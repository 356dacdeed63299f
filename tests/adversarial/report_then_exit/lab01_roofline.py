# Attack: forge the grade files at import, then leave at once with exit status 0.
import json
import os

{FORGE}

_forge()
os._exit(0)
