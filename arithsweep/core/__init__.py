"""core wing: problems, models, training, exact match and checkpoints (torch; no Ray, no MLflow).

Four rooms, imports one way (each imports the basics, its own room and the rooms before it;
`tests/test_layout.py` checks it with `ast`, function-level imports included):

    basics        errors.py, config.py, config_checks.py: torch-free, used by every room
    data/         tasks, formats, sampling, hash_sampling, mix, sort_task, quirke
    model/        layers, weights, model, checkpoint
    evaluation/   evaluate, stats, confirm, ood, inspect
    training/     recipe, train, step, population
    orchestrators api.py, bench.py, overrides.py: above all rooms, what the CLI calls

    basics <- data <- model <- evaluation <- training <- orchestrators
"""
