"""core.data: what a problem is and how problems are drawn, torch tensors only (no model).

tasks (Task, get_task), formats (token layouts), encoding (problems to tokens), sort_task
(the sort<N> task), sampling (the vectorised helpers behind Task.sample, the holdout hash),
hash_sampling (the counter-based training sampler), native_rows (its hot rows and the pad
encoding in C, hash_rows.c: the same integers), mix (the carry share and curriculum of each
training step) and quirke (Quirke's carry classes). Imports the core basics only (errors,
config, config_checks, native).
"""
