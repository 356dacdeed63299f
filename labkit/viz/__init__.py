"""Drawing only: every function here turns already-computed state into a figure or HTML.

Computation lives in the topic modules; widgets are thin wiring over
``frame(state) -> figure/HTML`` functions (see `labkit.viz.player`).
"""
