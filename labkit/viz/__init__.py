"""Shared drawing pieces (core): `labkit.viz.player` (the one Play + slider / controls widget, over
``frame(i) -> Figure or HTML`` functions) and `labkit.viz.svg` (inline-SVG cells and labels).

Each topic draws its own pictures in `labkit/<topic>/draw.py`, from finished data; the widgets that
compute and then draw are in the topic's `lab.py`.
"""
