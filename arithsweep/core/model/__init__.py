"""core.model: the population transformer and its files.

layers (primitives: projections, attention, norms, positions), weights (owned and derived
weights, the ties), model (ArithTransformer, count_params) and checkpoint (safetensors + JSON
save and load). Imports the core basics and core.data.
"""
