"""core.model: the population transformer and its files.

    layers       the primitives: projections, attention, norms, positions (CPU-tuned)
    weights      owned and derived weights of the frontier options (the ties)
    model        ArithTransformer (a pack of members of one shape), count_params
    tiny_layout  a one-block model's training loss and gradients from one C kernel
                 (tiny_kernel.c, compiled on first use)
    tiny_step    that layout's optimiser tail (Grokfast, guard, clipping, AdamW) in one C
                 call (tiny_step.c)
    tiny_ties    that layout's ties (effective weights and their gradients) in one C call
                 each way for the tbukic family's rules (tiny_ties.c)
    checkpoint   safetensors weights + a JSON config, saved and loaded; never pickle

Imports the core basics and core.data.
"""
