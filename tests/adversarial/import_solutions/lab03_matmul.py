# Attack: hand in the reference answers.
from solutions.lab03_matmul import *  # noqa: F401,F403
