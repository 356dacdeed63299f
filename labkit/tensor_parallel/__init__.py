"""Tensor parallelism (Lab 07): one layer's weights split across ranks.

    experts.py   expert parallelism: a mixture-of-experts layer, experts on different ranks, all-to-all
"""
