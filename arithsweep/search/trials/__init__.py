"""search.trials: one Tune trial, from a sampled config to its rounds, stops and checkpoints.

    configs     a sampled config to validated configs, a size (`ProposalSizer`) and a seed
                block; the constants every trial gets (`CONST_KEY`)
    trainable   the Tune trainable (`run_trial`): one runner for one proposal or a pack, the
                space's whole path as its first round, then rounds and finishers
    rounds      a proposal's stop rules, its near-miss rounds and its rows
    plateau     the plateau rule (a trial stops on its own curve)
    packs       several proposals of one shape in one Tune trial (`PackKeyer`)
    state       a trial's checkpoints: its best model(s), its whole training state, what a
                restore continues
    replay      near misses the deadline cut, trained again first on --resume
    cores       a trial running alone lent the idle cores (Tune's ResourceChangingScheduler)

Named `trials`, not `trial`: `arithsweep.search.trial` was the module `configs` was before the
rooms, and a search made before them pickled that name (see the search wing's moved-module
table). Imports core, the wing's basics and search.space.
"""
