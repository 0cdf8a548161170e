"""search wing: Ray Tune + Optuna look for the fewest-parameter model that reaches the target.

Imports core only: the CLI hands the driver its verifier and entry finders, so the search never
imports the leaderboard. By job:

    the run       driver (run_search), options (SearchOptions: every default, the trial cap;
                  progress, summary), plan (what it says before it starts; the space's
                  smallest point), tuner (the Tune experiment: constants, searcher, callbacks),
                  run_settings (the running search's registry and its stoppers), cluster
                  (starting or joining Ray), cores (a lone trial lent the idle cores), live
                  (events for the live table)
    the space     space_file (the YAML format), space_fields (what a space may set), spaces
                  (where spaces meet Optuna; finding them)
    proposing     searcher (Optuna proposes; only proposals that can still win train),
                  assembled from proposing (one proposal or a pack), bounding (the
                  incumbent's bound; the verification hold), shrink (the incumbent's
                  one-step-smaller neighbours) and telling (Optuna's bookkeeping); verdicts
                  (Optuna's side of a verdict)
    a trial       trial (a sampled config to validated configs, a size, a seed block),
                  trainable (the Tune trainable: one runner for one proposal or a pack),
                  rounds (a proposal's stop rules, near-miss rounds and rows), plateau (the
                  plateau rule), packs (several proposals of one shape in one Tune trial),
                  trial_state (its checkpoints and what a restore continues)
    the verdict   incumbent (verify a trial on the driver once it reaches the target),
                  replay (near misses the deadline cut, trained again first on --resume)
    the record    results (what the trials did; the summary), tracking (MLflow, driver
                  side), plots (the params / exact match picture), snapshots (Tune's
                  snapshot kept whole)

`arithsweep search --help`; docs/search-internals.md walks through a search.
"""
