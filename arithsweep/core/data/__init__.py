"""core.data: what a problem is and how problems are drawn, torch tensors only (no model).

tasks (Task, get_task), formats (token layouts), sort_task (the sort<N> task), sampling (the
vectorised helpers behind Task.sample, the holdout hash), hash_sampling (the counter-based
training sampler) and quirke (Quirke's carry classes). Imports the core basics only (errors,
config, config_checks).
"""
