"""core.training: the packed trainer, K seeds (or many proposals) of one shape at once.

    recipe      the tiny-model recipe: decay drops, the Grokfast filter, the polish on the
                model's own errors and L-BFGS
    optim       the pack's AdamW, one lr and decay per member, and its lr table
    train       TrainResult, the lr schedule, the layout choice, loss and clipping
    streams     the data streams: each seed's batches, the polish's mix of mined errors
    step        one optimiser step of a pack, captured as a CUDA graph where it can be
    resume      a run's whole state on disk, so that a killed run continues bit for bit
    packing     which proposals may share a pack (pack_key), the pack's batches, member views
    population  the loop: proposals of one shape in one pack, each stopping on its own
                (`train` is a pack of one)
    path        a recipe's whole path: its phases in order, selection between them, one
                call that resumes mid-phase
    finish      the near-miss finishers after training: targeted fine-tuning, CMA-ES
    finish_score  what the finishers compute with: torch's layout or the tiny kernel

Imports the core basics, core.data, core.model and core.evaluation.
"""
