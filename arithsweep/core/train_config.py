"""`TrainConfig`, one training run of K packed seeds, validated, and its word lists.

Its field defaults *are* what `arithsweep train` does with no options (3000 steps of batch
128 per seed at lr 1e-2, 4 seeds): with `ModelConfig`'s defaults it reaches 99%+ exact match
on add3 in about half a minute on a 2-core CPU. Search spaces, checkpoints and `--set`
override fields; nothing else holds a second copy of a default. SAMPLINGS, SAMPLERS and
LAYOUTS are the words of its word-valued fields, LEGACY_TRAIN_DEFAULTS what an old
checkpoint's missing fields mean, MAX_SEEDS the most seeds one run packs. The list fields'
checks live in core/config_checks.py.

Torch-free on purpose, so that search spaces, the CLI and `arithsweep params` validate a
configuration without importing torch. Errors name the field (`ConfigError`). Re-exported by
`arithsweep.core.config`.

    python -c "from arithsweep.core.train_config import TrainConfig; print(TrainConfig())"
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from arithsweep.core.config_base import DictConfig
from arithsweep.core.config_checks import check_cull, check_phases, check_stages, check_wd_drops
from arithsweep.core.errors import ConfigError
from arithsweep.core.path_checks import check_path

SAMPLINGS = ("uniform", "values", "carry", "mixed", "enriched")
SAMPLERS = ("hash", "stream")
LAYOUTS = ("auto", "reference", "tiny")
# Train fields whose default changed: a checkpoint's train config that lacks one was made
# under the old default, so loading it fills these in before the dataclass defaults apply,
# and retraining reproduces it.
LEGACY_TRAIN_DEFAULTS = {"sampler": "stream"}


MAX_SEEDS = 1024  # seeds packed into one training run


@dataclass
class TrainConfig(DictConfig):
    _label = "train config"  # unannotated: a class attribute, not a dataclass field

    steps: int = 3000  # optimiser steps of the first cosine pass (early stop may end sooner)
    batch_size: int = 128  # problems per step *per seed*
    lr: float = 1e-2  # peak learning rate after warmup
    min_lr_ratio: float = 0.05  # cosine floor as a fraction of lr
    warmup: int = 50  # linear warmup steps
    # 0: the first pass's cosine starts at the peak and reaches the floor one step after the
    # last | 1: one step further along, as tbukic's loop (`for step in range(1, N + 1)`,
    # progress step / N): its first step already below the peak, its last at the floor
    cosine_from: int = 0
    weight_decay: float = 0.01  # AdamW decoupled decay, on the parameters weight_decay_scope says
    # matrices: projections and tables only (norm gains and biases are not pulled to 0) | all:
    # every parameter, the tie numbers and norm gains too (MicroAdder's and tbukic's AdamW)
    weight_decay_scope: str = "matrices"
    # adaptive decay (MicroAdder's 74 p): [[exact_match, factor], ...]; after each evaluation a
    # member decays at factor * weight_decay for the last pair whose held-out exact match it has
    # reached with >= 70% of its answer digits right, else at weight_decay (so decay returns if
    # it falls back). MicroAdder: [[0.02, 0.1], [0.2, 0.01]]. None = constant.
    wd_drops: list | None = None
    # tbukic's form of wd_drops: a drop holds for the rest of the run once the member's exact
    # match has passed it at one evaluation (no digit gate; decay never comes back when a
    # grokking seed dips). Its "x0.1 past 1%, x0.01 past 5%" compounds: [[0.01, 0.1],
    # [0.05, 0.001]] with this on
    wd_drops_hold: bool = False
    beta1: float = 0.9
    beta2: float = 0.98
    grad_clip: float = 1.0  # per-seed global-norm clip; 0 = off
    seeds: int = 4  # K: seeds of one architecture trained together
    seed: int = 0  # seed i of the pack is seed + i (init and data)
    # A checkpoint folder whose weights start every seed instead of a fresh initialisation (seed
    # i then differs only in its data): continuing a near miss at a low lr, with its own
    # schedule. The checkpoint must hold this run's architecture and task format. A run's state
    # folder (`<out>/resume`) instead starts each member from its own weights there (a pack
    # continued on its next phase; same seeds count). None = fresh.
    init_from: str | None = None
    # uniform (operand lengths uniform) | values (operands uniform over the problem space) |
    # carry (carry cascades forced) | mixed: carry_frac carry, the rest half uniform, half values
    # | enriched: Quirke's classes S0..S5, M0..M4, N1..N4 in equal shares (add/sub/mix only;
    # core/data/quirke.py)
    sampling: str = "mixed"
    # hash: counter-based, keyed by (seed, step, row), all members in one vectorised call, the
    # same on CPU and CUDA (core/data/hash_sampling.py). stream: the older per-seed torch.Generator
    # stream; checkpoints saved without this field were trained with it, so loading one (or
    # retraining from its config.json) without the field means "stream" (model/checkpoint.py,
    # overrides.py); recipes/add10-742.yaml says `sampler: stream` itself.
    sampler: str = "hash"
    carry_frac: float = 0.25  # with "mixed": share of each batch drawn carry-enriched
    # the carry rows' pattern: chain (a carry, then a run of 9-sums of random length) | mixed
    # (a third each: a single carry at a random place, such a chain, a chain out of the top
    # digit; MicroAdder's sampler mixes these)
    carry_patterns: str = "chain"
    # The carry share fades linearly from carry_frac to 0 between these fractions of `steps`
    # (MicroAdder: 80% fading between 25% and 75%); equal = no fade.
    carry_fade_start: float = 0.0
    carry_fade_end: float = 0.0
    # with "mixed": share of the rows that are not carry rows drawn uniform over values (the
    # rest: uniform operand lengths); MicroAdder draws them all over values (1.0)
    values_share: float = 0.5
    # how rows drawn uniform over values ("values", and "mixed"'s values rows) read a
    # curriculum's cap: cap (both operands uniform below 10^cap) | shared (tbukic's
    # generate_batch: one length L uniform in 1..cap for both, each operand uniform below 10^L;
    # at the task's full length, plain values). Hash sampler only
    values_lengths: str = "cap"
    # Unequal stages, as the records train: [[until_step, max_digits], ...] in rising order, e.g.
    # MicroAdder's [[2000, 3], [7000, 6]] (1-3 digits to step 2K, 1-6 to 7K, then all); when
    # given it replaces curriculum_steps / curriculum_stages.
    curriculum: list | None = None
    curriculum_steps: int = 0  # steps over which the longest operand length grows to full; 0 = off
    # 0: the longest operand grows by one digit at a time over curriculum_steps; k > 0: k equal
    # stages, stage i capped at ceil(N*(i+1)/(k+1)) digits (MicroAdder's 3 / 6 / 10 for k=2)
    curriculum_stages: int = 0
    # Length generalisation (McLeish et al. 2024): train only on operands of at most this many
    # digits although the task (vocabulary, context) covers more; None = the task's full length.
    # Evaluation during training is capped the same way, so seed selection never sees longer
    # problems; `arithsweep ood` measures how far the model generalises beyond it.
    train_digits: int | None = None
    restart_steps: int = 0  # a second cosine pass of this many steps (warm restart); 0 = off
    # Phases after the cosine (and restart), before the polish: a list of {steps, lr, schedule:
    # constant | cosine (to min_lr_ratio), grokfast: bool}. A phase with grokfast on applies the
    # Grokfast filter below; once any phase asks for it, only those phases do (tbukic's 36 p: a
    # long cosine, then a low-lr Grokfast phase). E.g. [{steps: 20000, lr: 1.0e-3,
    # schedule: cosine, min_lr_ratio: 0.1, grokfast: true}].
    phases: list | None = None
    # The whole path of a frontier recipe (core/training/path.py): an ordered list of phases,
    # each a mapping of this config's fields that differ from the top level in that phase
    # (steps, lr, min_lr_ratio, cosine_from, warmup, grokfast_*, curriculum, wd_drops, ...)
    # plus `name`, `moments` (restart: fresh AdamW moments and Grokfast average, as a new
    # `train --init-from <out>/resume` | keep: carried over), `select` (re-form the pack from
    # its best k members by held-out exact match, as copies with new data streams) and
    # `perturb_lr` (with select: the copies' lr factors, PBT's explore). Every member enters a
    # phase from its own last state (or its parent's best, after select). None = one phase.
    path: list | None = None
    # Successive halving inside the pack: [[step, keep], ...] at evaluation steps of this
    # schedule (a path phase: of the phase). There, at most `keep` members of each proposal
    # with the best held-out exact match so far (the evaluation training selects on, never a
    # verification problem) go on training; the others stop where they are, their best
    # weights kept, and stay stopped for the rest of the path (a top-level cull is the path's
    # first phase's; a later phase culls with its own). A member trains the same bits
    # alone as in any pack, so a survivor ends exactly where the whole pack would have taken
    # it, for the steps of fewer members (the 36's record path: docs/results.md#ticket).
    # None = every member trains every step.
    cull: list | None = None
    # with init_from a run's state folder: also take AdamW's moments and the Grokfast average
    # from it (a path phase with `moments: keep`), not only the weights
    init_moments: bool = False
    # Grokfast-EMA gradient filter: g += lambda * EMA_alpha(g), amplifying the slow gradient
    # components that generalise; alpha 0 = off (the 36-p AdderBoard record used 0.98 and 3)
    grokfast_alpha: float = 0.0
    grokfast_lambda: float = 0.0
    # where the average starts: grad (the paper's gradfilter_ema: the first gradient itself) |
    # zero (tbukic's sweep code: zeros, so its first steps are barely filtered)
    grokfast_start: str = "grad"
    # Polish: after training, this many steps at constant lr polish_lr on batches half made of
    # the member's own errors, mined from polish_pool problems of the TRAINING split only
    # (never a held-out problem: those are verification's). 0 = off.
    polish_steps: int = 0
    polish_lr: float = 1e-3
    polish_pool: int = 100_000
    # L-BFGS polish, last: per member, this many full-batch L-BFGS iterations on lbfgs_pool
    # fixed TRAINING-split problems (staghado's 122 p: 2,048); 0 = off
    lbfgs_steps: int = 0
    lbfgs_pool: int = 2048
    # A search trial's near-miss round (search/rounds.next_round): "retrain" its best seed
    # alone from its own initialisation for twice the steps (add3's 57 p: 98.78% -> 99.52%), or
    # "continue" the best member's best weights (init_from) as min(seeds, 8) members with their
    # own data, for `steps` more steps from a tenth of the lr the cosine ended at (rounds.
    # CONTINUE_LR_SHARE: from that lr itself a finished model swings), with no curriculum: a
    # grokking recipe's seed retrained on another schedule lost its lottery (add10's 44 p).
    # "ticket": the whole schedule (its path included) again with as many new seeds, for a
    # shape that is a lottery: the 36 trained to 96.2% on one 128-seed ticket and to 97.8%
    # (finished to 99.01%) on another, where "continue" from the path's end lr (1e-5) stalled
    near_miss_round: str = "retrain"
    # Finishers for near misses (core/training/finish.py), after training, on the best member
    # when it misses the target (`train`; a search trial from 95% up): 95-99% models are
    # finished this way, not by more steps. Each is kept only if held-out exact match does not
    # fall (fine-tuning) or rises (CMA-ES); both see only the TRAINING split.
    # Targeted fine-tuning: up to finish_rounds rounds (0 = off) of finish_steps AdamW steps
    # (no decay) at finish_lr on batches of the member's errors among finish_pool fixed
    # training-split problems, padded with fresh training problems to batch_size; the errors
    # are mined again each round, until none is left (tbukic's 36 p: 2 rounds, 70 pairs, 1e-4).
    finish_rounds: int = 0
    finish_steps: int = 200
    finish_lr: float = 1e-4
    finish_pool: int = 10_000
    # CMA-ES polish of the whole weight vector (models of at most 128 numbers): this many
    # candidate evaluations (0 = off) from step size finish_cmaes_sigma, scored on the same
    # pool (the 49-p claim: sigma 5e-4, 97.4% -> 100%)
    finish_cmaes_evals: int = 0
    finish_cmaes_sigma: float = 5e-4
    # what both finishers compute their forwards and losses with (finish_score.py): reference
    # (torch's layout) | tiny (the tiny kernel: entry 60's finish took 8.7x less CPU) | auto (tiny
    # where choose_layout picks it for this run's training). The two agree to float32
    # rounding, not to the bit, so the default stays reference: every finish made before this
    # field (entry 60's published one) repeats as it was
    finish_layout: str = "reference"
    # share of the finishers' pool and of the polish's (finish_pool, polish_pool) drawn as
    # subtractions near zero (Task.sample's near_zero: |a - b| < 10^j) on sub and mix tasks;
    # 0 = none. The published mix6 of 15,744 p failed 138 of 10^6 subtractions, 134 of them
    # answers below 1,000, which a uniform or carry pool almost never holds
    near_zero_share: float = 0.0
    eval_every: int = 100  # steps between exact-match evaluations
    eval_size: int = 4096  # held-out problems per evaluation (disjoint from the training stream)
    target: float = 0.99  # early stop once any seed reaches this exact match
    early_stop: bool = True
    # rows of each member's batch per forward/backward: a step is split into
    # batch_size // micro_batch pieces and their gradients summed (the same update to float
    # rounding). 0 = the whole step. Per member, so a member trains to the same floats alone
    # and in a pack; the pack-wide split it replaced (~1024 rows of the whole pack on a CPU)
    # did not, and was within 7% of the whole step either way (2-core CPU, reference layout)
    micro_batch: int = 0
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    compile: bool = False  # torch.compile the packed loss (pays off on long runs)
    # on CUDA, record the whole step (forward, backward, clipping, AdamW) once as a CUDA graph
    # and replay it (core/training/step.py); false = launch every kernel every step (for comparison)
    cuda_graph: bool = True
    # how a step computes loss and gradients: reference (the PyTorch model) | tiny (one-block
    # models in one C kernel, CPU only: core/model/tiny_layout.py) | auto: tiny where the model
    # fits it and is small enough to gain (training.train.choose_layout), else reference
    layout: str = "auto"
    time_budget: float = 0.0  # seconds; stop after the evaluation that crosses it; 0 = none
    # Stop after this many steps with the schedule unchanged (its cosine still spans `steps`):
    # how a search trial's round that its own rules stopped early (a plateau, a cut) is
    # retrained to the same weights (leaderboard/verify.reproduce_command). None = the end
    stop_at: int | None = None
    # A long run's whole state (weights, AdamW moments, Grokfast EMA, decay drops, data streams'
    # positions, RNGs, histories: core/training/resume.py) is written every checkpoint_every
    # steps, or with 0 about every checkpoint_seconds of wall time, and when the run stops, so
    # `train --resume` and a restored search trial continue it bit for bit. When states are
    # written never changes what is trained.
    checkpoint_every: int = 0
    checkpoint_seconds: float = 300.0

    def __post_init__(self) -> None:
        def need(ok: bool, field: str, why: str) -> None:
            if not ok:
                raise ConfigError(f"train config: {field}={getattr(self, field)!r}: {why}")

        def whole(field: str, lo: int) -> None:
            v = getattr(self, field)
            need(isinstance(v, int) and not isinstance(v, bool) and v >= lo, field,
                 f"must be a whole number >= {lo}")

        for f in ("steps", "batch_size", "seeds", "eval_every", "eval_size"):
            whole(f, 1)
        # every seed is a copy of the model and its batch in one step: 100,000 took 14 GB and
        # five minutes before its first step; more than this is a typo, or several runs
        need(self.seeds <= MAX_SEEDS, "seeds", f"at most {MAX_SEEDS} are trained together; "
             f"train more in several runs (--seed sets the first)")
        for f in ("warmup", "curriculum_steps", "curriculum_stages", "restart_steps", "seed",
                  "micro_batch", "polish_steps", "checkpoint_every"):
            whole(f, 0)
        if self.train_digits is not None:
            whole("train_digits", 1)
        whole("polish_pool", 1)
        need(self.near_miss_round in ("retrain", "continue", "ticket"), "near_miss_round",
             "must be retrain, continue or ticket")
        start = self.init_from
        need(start is None or (isinstance(start, str) and bool(start.strip())), "init_from",
             "must be a checkpoint folder or null")
        need(0 <= self.carry_fade_start <= self.carry_fade_end <= 1, "carry_fade_end",
             "carry_fade_start <= carry_fade_end must both be fractions of steps in [0, 1]")
        need(isinstance(self.values_share, (int, float)) and not isinstance(
            self.values_share, bool) and 0 <= self.values_share <= 1, "values_share",
             "must be a fraction in [0, 1]")
        need(0 <= self.grokfast_alpha < 1, "grokfast_alpha", "must be in [0, 1) (0 = off)")
        need(self.grokfast_lambda >= 0, "grokfast_lambda", "must be >= 0")
        need(self.grokfast_start in ("grad", "zero"), "grokfast_start", "must be grad or zero")
        need(self.cosine_from in (0, 1), "cosine_from", "must be 0 or 1")
        need(self.values_lengths in ("cap", "shared"), "values_lengths", "must be cap or shared")
        need(self.values_lengths == "cap" or self.sampler == "hash", "values_lengths",
             "shared is drawn by sampler hash only")
        need(self.polish_lr > 0, "polish_lr", "must be > 0")
        need(self.lr > 0, "lr", "must be > 0")
        need(self.checkpoint_seconds > 0, "checkpoint_seconds", "must be > 0")
        need(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", "must be in [0, 1]")
        need(self.weight_decay >= 0, "weight_decay", "must be >= 0")
        need(0 <= self.beta1 < 1, "beta1", "must be in [0, 1)")
        need(0 <= self.beta2 < 1, "beta2", "must be in [0, 1)")
        need(self.grad_clip >= 0, "grad_clip", "must be >= 0 (0 = off)")
        need(self.sampling in SAMPLINGS, "sampling", f"must be one of {', '.join(SAMPLINGS)}")
        need(self.carry_patterns in ("chain", "mixed"), "carry_patterns", "must be chain or mixed")
        need(self.weight_decay_scope in ("matrices", "all"), "weight_decay_scope",
             "must be matrices or all")
        if self.curriculum is not None:
            self.curriculum = check_stages(self.curriculum)
        if self.wd_drops is not None:
            self.wd_drops = check_wd_drops(self.wd_drops)
        for f in ("layout", "finish_layout"):
            need(getattr(self, f) in LAYOUTS, f, f"must be one of {', '.join(LAYOUTS)}")
        need(self.sampler in SAMPLERS, "sampler", f"must be one of {', '.join(SAMPLERS)}")
        need(0 <= self.carry_frac <= 1, "carry_frac", "must be in [0, 1]")
        need(0 < self.target <= 1, "target", "must be in (0, 1]")
        need(self.time_budget >= 0, "time_budget", "must be >= 0 seconds (0 = none)")
        need(isinstance(self.device, str) and (self.device in ("auto", "cpu")
             or self.device.startswith("cuda")), "device", "must be auto, cpu, cuda or cuda:N")
        if self.phases is not None:
            self.phases = check_phases(self.phases)
        if self.cull is not None:
            self.cull = check_cull(self.cull, self.main_steps, self.eval_every)
        if self.path is not None:
            self.path = check_path(self.path, self)
        whole("lbfgs_steps", 0)
        whole("lbfgs_pool", 1)
        for f in ("finish_rounds", "finish_cmaes_evals"):
            whole(f, 0)
        whole("finish_steps", 1)
        if self.stop_at is not None:
            whole("stop_at", 1)
        whole("finish_pool", 1)
        v = self.near_zero_share
        need(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1,
             "near_zero_share", "must be in [0, 1)")
        for f in ("finish_lr", "finish_cmaes_sigma"):
            v = getattr(self, f)
            need(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                 and v > 0, f, "must be a finite number > 0")

    @property
    def main_steps(self) -> int:
        """Steps before the polish: the cosine, the restart and every phase."""
        return self.steps + self.restart_steps + sum(p["steps"] for p in self.phases or ())

    @property
    def grokfast_phased(self) -> bool:  # the filter only in the phases that ask for it
        return any(p["grokfast"] for p in self.phases or ())
