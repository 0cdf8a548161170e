"""search.space: the search-space format, what a space may set, and its Optuna face.

    file      the YAML format: reading and validating a space file (nothing Optuna)
    values    one key's value (fixed, a choice or a range) and its `when`, checked
    fields    what a space may set (the ModelConfig, TrainConfig and Format fields) and one
              parsed dimension (`Param`, `Condition`); the seed and steps rules
    spaces    where a space meets Optuna: sampling, the Ray define-by-run function, finding
              the shipped spaces (`load_space`, `default_space`, `list_spaces`)

The bottom room: imports core and the wing's basics only, so a space can be read, checked
and listed without Ray or Optuna's trials.
"""
