"""search wing: Ray Tune + Optuna look for the fewest-parameter model that reaches the target.

Imports core only: the CLI hands the driver its verifier and entry finders, so the search never
imports the leaderboard. Four rooms between the run at the top and the basics at the bottom,
imports one way (each imports the basics, its own room and the rooms below it;
`tests/test_layout.py` checks it with `ast`, function-level imports included):

    the run       driver (run_search), tuner (the Tune experiment: constants, searcher,
                  callbacks), plan (what it says before it starts; the space's smallest
                  point)
    report/       live, tracking (MLflow), results, plots: what the search shows and records
    propose/      searcher, proposing, bounding, shrink, telling, incumbent, verdicts: what
                  to train next, and the bound
    trials/       trainable, configs, state, rounds, plateau, packs, replay, cores: one Tune
                  trial, from a sampled config to its rounds, stops and checkpoints
    space/        file, fields, spaces: the YAML format and its Optuna face
    basics        options (SearchOptions: every default, the trial cap; progress, summary),
                  run_settings (the running search's registry and its stoppers), snapshots
                  (Tune's snapshot kept whole), cluster (starting or joining Ray)

    basics <- space <- trials <- propose <- report <- the run

Each room's docstring says what its modules are for. `arithsweep search --help`;
docs/search-internals.md walks through a search.
"""
