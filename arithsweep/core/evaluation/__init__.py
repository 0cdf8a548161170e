"""core.evaluation: how good a model is, and when training may say it reached the target.

evaluate (fast exact match, greedy decoding, breakdowns), stats (Wilson bound, nines),
confirm (the held-out evaluation set, the best-of-K stop rule and the full check), per_op
(a million held-out problems of one operation, for six nines per operation), ood
(length generalisation grids) and inspect (one problem's attention and answer probabilities).
Imports the core basics, core.data and core.model.
"""
