"""core wing: problems, models, training, exact match and checkpoints (torch; no Ray, no MLflow).

Four rooms over torch-free basics, imports one way (each imports the basics, its own room and
the rooms before it; `tests/test_layout.py` checks it with `ast`, function-level imports
included):

    basics        errors, numbers, yaml_loader, hashing, config (import the configs from
                  here), config_base, model_config, train_config, config_checks, path_checks
                  (a recipe's path of phases, checked), native (builds
                  and loads the C helpers), arithmetic (the version of training's floats, in
                  every checkpoint and state): torch-free, used by every room
    data/         tasks, formats, sort_task, sampling, hash_sampling, mix, quirke
    model/        layers, weights, model, tiny_layout, checkpoint
    evaluation/   evaluate, stats, confirm, per_op, ood, inspect
    training/     recipe, optim, train, streams, step, resume, packing, population, path,
                  finish, finish_score
    orchestrators api, bench, bench_tiny, overrides: above all rooms, what the CLI calls

    basics <- data <- model <- evaluation <- training <- orchestrators

Each room's docstring says what its modules are for.
"""
