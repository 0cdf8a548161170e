"""search.propose: what to train next, and the bound no proposal may reach.

    searcher    `ConstrainedOptunaSearch` (Optuna proposes; only proposals that can still win
                train) and `BudgetedSearchGenerator`, assembled from the parts below
    proposing   one proposal or a pack for a new Tune trial
    bounding    the incumbent's bound: proposals at or above it told at once, never trained;
                the verification hold
    shrink      a new incumbent's one-step-smaller neighbours, queued next; an entry's point
                in a space (`map_entry`)
    telling     Optuna's bookkeeping: every proposal told once, with its constraint
    incumbent   verify a trial on the driver once it reaches the target (`VerifyCallback`);
                the verified record and the incumbent a search starts from
    verdicts    Optuna's side of a verdict: the constraint, proposals held until verified

Imports core, the wing's basics, search.space and search.trials.
"""
