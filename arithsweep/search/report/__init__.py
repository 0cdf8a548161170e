"""search.report: what a search shows while it runs and records when it ends.

    live        the driver's events for the live table, short trial names (`LiveCallback`)
    tracking    MLflow, driver side: one run per proposal under the search's parent run
                (`MlflowTrialCallback`)
    results     what the trials did, read back as plain dicts; the summary
    plots       the params / exact match picture and its Pareto frontier

Imports core, the wing's basics, search.trials and search.propose.
"""
