"""XTC's testbed, beside the product: the host lab (real LXC / netns VRs and traffic), the
simulated plant and its experiments, the benchmarks and the demo.

It depends on the product package :mod:`xtc`; nothing in :mod:`xtc` imports it.
"""
