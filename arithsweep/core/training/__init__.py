"""core.training: the packed trainer, K seeds (or many proposals) of one shape at once.

Bottom-up, one way: recipe (Grokfast, the polish phases) <- train (results, schedule, data
streams, loss, clipping) <- step (one optimiser step, CUDA-graph captured where it can be) <-
population (the loop, per-member AdamW, stopping; `train` is a pack of one). Imports the core
basics, core.data, core.model and core.evaluation.
"""
