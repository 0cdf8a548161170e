"""The settings of one search (validated), its progress and the summary it returns.

`SearchOptions` is what `arithsweep search` (or a Python caller) asks for; `SearchProgress` is
what the live view is told while it runs; `SearchSummary` is what `run_search` returns and
writes to `summary.json`. Torch-free and Ray-free. Every default of the search is a field
default here, read by the CLI and the trials alike (tests/test_defaults.py); what a running
search knows beyond its settings is `run_settings.DriverState`.

    python -c "from arithsweep.search.options import SearchOptions; print(SearchOptions('add3'))"
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from arithsweep.core.errors import ConfigError
from arithsweep.core.evaluation.stats import protocol_aim


@dataclass
class SearchOptions:
    task: str | None = None  # required for a new search; taken from search.json on resume
    target: float | None = None  # exact match to reach, in (0, 1]; None: TrainConfig.target
    space: str = ""  # shipped space name or path to a YAML file; "" = spaces.default_space(task)
    # --trials: Tune trials in all, each up to proposals_per_trial proposals (on resume: the
    # new total, counting the earlier ones); None: see trial_cap (no cap under a time budget)
    trials: int | None = None
    concurrency: int | None = None  # max trials at once; default: as many as resources allow
    cpus_per_trial: float = 1.0
    # --spare-cores/--no-spare-cores: a CPU trial running alone is lent the cores no other
    # trial holds and gives them back when another waits (search.trials.cores)
    spare_cores: bool = True
    gpus_per_trial: float | None = None  # fractions allowed; default 1 if the cluster has GPUs
    time_budget: float = 0.0  # seconds for the whole search (0 = none)
    trial_time_budget: float = 0.0  # seconds per trial, overrides the space (0 = the space's)
    trial_steps: int = 0  # steps per trial, overrides the space (0 = the space's)
    # A trial stops early once a seed reaches train_target (default: target) on its held-out
    # eval sample (train.eval_size); a bit above target leaves room for full verification.
    train_target: float | None = None
    address: str | None = None  # None: new local Ray; "auto" or "HOST:PORT": join a cluster
    num_cpus: int | None = None  # CPUs of a new local Ray instance (default: all)
    name: str | None = None  # default: <task>-<timestamp>
    resume: str | None = None  # name of a search to continue
    root: str | None = None  # default: <cwd>/searches
    mlflow_uri: str | None = None  # default: sqlite:///<root>/mlflow.db
    n_verify: int = 3  # best feasible trials to verify at the end
    seed: int = 0  # Optuna sampler seed and base training seed
    # --max-params: proposals above this are never trained (the search's bound from the start)
    max_params: int | None = None
    # --frontier: train every size to draw the params/accuracy trade-off; the incumbent does
    # not bound proposals (max_params still does)
    frontier: bool = False
    patience: int = 8  # evaluations without progress on its own curve before a trial stops
    extra_rounds: int = 1  # rounds a near miss earns (each: its best seed, twice the steps)
    near_miss: float = 0.25  # a round within this of the target is a near miss
    # --max-failures: restarts of a trial whose process died (the OOM killer, Ray's memory
    # monitor, a preempted node, a crash), each from its last saved state in the same run;
    # past them it ends errored and the search goes on (0: no restart)
    max_failures: int = 3
    # --proposals-per-trial: Optuna proposals of one shape trained together as one population
    # in each Tune trial (see arithsweep.search.trials.packs). None: 1 on CPU (one proposal per
    # trial, as without packs); on a GPU machine with --gpus-per-trial not given, one trial
    # per GPU holding GPU_PROPOSALS proposals, so that a tiny model fills the GPU.
    proposals_per_trial: int | None = None
    fail_when: dict | None = None  # testing only: raise in trials whose config matches
    command: str | None = None  # the command line that started it, kept in search.json
    # --from-entry: a leaderboard entry id (or sha256 prefix) or a checkpoint folder, the
    # verified incumbent a new search starts from (run_search's find_entry looks it up)
    from_entry: str | None = None
    # --fresh: start from the space's start point even where the board holds an entry of the
    # task (without it a new search starts from the board's smallest, see run_search's
    # find_smallest)
    fresh: bool = False
    # --restart-unfinished: resume a search started under another arithmetic (core/arithmetic.py)
    # here: its finished trials stand, its unfinished ones train again from step 0 (a state of
    # one version's floats is never continued with another's)
    restart_unfinished: bool = False

    def __post_init__(self) -> None:
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise ConfigError(f"search: {what}")

        need(self.task is not None or self.resume is not None or bool(self.from_entry),
             "--task is required for a new search (or --resume NAME, or --from-entry)")
        need(not (self.from_entry and self.resume),
             "--from-entry starts a new search; a resumed one keeps the incumbent it had")
        need(not (self.fresh and self.resume),
             "--fresh starts a new search; a resumed one keeps the incumbent it had")
        need(not self.restart_unfinished or self.resume is not None,
             "--restart-unfinished goes with --resume (a search of another arithmetic)")
        need(not (self.fresh and self.from_entry),
             "--fresh starts from the space's start point and --from-entry from an entry: "
             "give one")
        for f in ("target", "train_target"):
            v = getattr(self, f)
            need(v is None or (isinstance(v, (int, float)) and 0 < v <= 1),
                 f"{f}={v!r}: must be in (0, 1]")
        for f, lo in (("trials", 1), ("concurrency", 1), ("trial_steps", 0), ("num_cpus", 1),
                      ("n_verify", 0), ("patience", 1), ("extra_rounds", 0),
                      ("max_failures", 0), ("max_params", 1), ("proposals_per_trial", 1)):
            v = getattr(self, f)
            need(v is None and f in ("trials", "concurrency", "num_cpus", "max_params",
                                     "proposals_per_trial") or (
                isinstance(v, int) and not isinstance(v, bool) and v >= lo),
                f"{f}={v!r}: must be a whole number >= {lo}")
        for f in ("cpus_per_trial", "gpus_per_trial", "time_budget", "trial_time_budget"):
            v = getattr(self, f)
            need(v is None and f == "gpus_per_trial" or (
                isinstance(v, (int, float)) and (v > 0 if f == "cpus_per_trial" else v >= 0)),
                f"{f}={v!r}: must be " + ("> 0" if f == "cpus_per_trial" else ">= 0"))
        for f in ("name", "resume"):
            v = getattr(self, f)
            need(v is None or (v and "/" not in v and v not in (".", "..")),
                 f"{f}={v!r}: must be a plain directory name")
        uri = self.mlflow_uri
        need(uri is None or "://" not in uri or uri.split("://", 1)[0].split("+")[0]
             in MLFLOW_SCHEMES, f"mlflow_uri={uri!r}: expected a folder, file:, sqlite:///FILE, "
             "postgresql://, mysql://, mssql://, http(s):// or databricks")
        need(isinstance(self.seed, int) and not isinstance(self.seed, bool)
             and 0 <= self.seed < MAX_SEED, f"seed={self.seed!r}: must be in 0..{MAX_SEED - 1}")
        need(isinstance(self.near_miss, (int, float)) and 0 <= self.near_miss <= 1,
             f"near_miss={self.near_miss!r}: must be in [0, 1]")
        need(not (self.name and self.resume and self.name != self.resume),
             "give either --name (new search) or --resume (existing one), not both")


# --seed below this keeps every training seed under 2^63 (trial.seed_block: TRIALS_PER_SEED
# blocks of SEED_BLOCK seeds per --seed)
MAX_SEED = 1 << 26
# MLflow tracking stores by URI scheme (a driver may follow '+', as postgresql+psycopg2)
MLFLOW_SCHEMES = ("file", "sqlite", "postgresql", "mysql", "mssql", "http", "https",
                  "databricks")
GPU_PROPOSALS = 16  # default proposals per trial when each trial gets a whole GPU
# the cap of a search given neither --trials nor --time-budget: something must end it
DEFAULT_TRIALS = 20


def train_target(opts: SearchOptions, task: str, target: float) -> float:
    """Where the search's trials stop (their train target): --train-target when given, else a
    bit above the target where an outside board checks the task's finds on its own sample
    (add10 at 0.99: 0.992, AdderBoard's), else the target; never below it."""
    return max(target, opts.train_target or protocol_aim(task, target))


def trial_cap(trials: int | None, time_budget: float, stored: dict[str, Any] | None = None
              ) -> tuple[int | None, str]:
    """(the Tune trials a search may have in all, the earlier runs' included, None for no cap;
    where that number comes from, as the search's first lines say it).

    `--trials` when given (on a resume too: the new total). Not given, a resume keeps the cap
    its last run had (`stored`, its search.json: a search started with -n 300 and cut by its
    deadline goes on towards 300, where a default of 20 trained nothing); a search with no cap
    of its own has none under a time budget (the budget ends it, not an unseen count) and
    DEFAULT_TRIALS without one."""
    if trials is not None:
        return trials, "--trials"
    if stored:
        runs = [r.get("trials") for r in stored.get("resumes") or [] if isinstance(r, dict)]
        last = runs[-1] if runs else stored.get(
            "trials", (stored.get("options") or {}).get("trials"))
        if isinstance(last, int) and not isinstance(last, bool):
            return last, "the cap it had"
    if time_budget:
        return None, "none"
    return DEFAULT_TRIALS, "the default without a --time-budget"


def moved(stored: dict[str, Any], root: str) -> dict[str, Any]:
    """A resumed search's search.json with the paths it recorded under its old root moved to
    `root`, where the folder is now: a search kept in a repository between sittings is resumed
    from a clone at another path (its space copy, its MLflow database beside it). Paths
    outside the old root (a shipped space, another MLflow server) are kept as they are."""
    old = str((stored.get("options") or {}).get("root") or "").rstrip("/")
    if not old or old == root.rstrip("/"):
        return stored

    def follow(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        for scheme in ("", "sqlite:///", "file://"):
            if value.startswith(scheme + old + "/"):
                return scheme + root.rstrip("/") + value[len(scheme + old):]
        return value

    out = {k: follow(v) if k in ("space_path", "mlflow_uri", "optuna_storage") else v
           for k, v in stored.items()}
    out["options"] = {**stored["options"], "root": root}
    return out


def resources_per_trial(opts: SearchOptions, cluster_gpus: float) -> tuple[float, int]:
    """(GPUs per trial, proposals per trial): the one place the GPU defaults are chosen.

    Without --gpus-per-trial, a cluster with GPUs gives each trial one whole GPU, and then
    (without --proposals-per-trial) GPU_PROPOSALS proposals per trial: tiny models are
    launch-bound, so one big population per GPU beats many small trials sharing it. On CPU
    (or with an explicit GPU share) a trial is one proposal unless asked otherwise."""
    gpus = opts.gpus_per_trial
    whole_gpu = gpus is None and cluster_gpus >= 1
    if gpus is None:
        gpus = 1.0 if whole_gpu else 0.0
    proposals = opts.proposals_per_trial
    if proposals is None:
        proposals = GPU_PROPOSALS if whole_gpu else 1
    return float(gpus), int(proposals)


@dataclass
class SearchProgress:
    """Where a running search stands, from what the driver knows: every event it feeds the
    live view (`run_search(on_update=...)`) carries one, as a dict, under "search". Counts of
    trained and running proposals are the events' own (one per proposal, with its status)."""

    name: str
    started: float  # time.time() when this run began (a resume: when it resumed)
    time_budget: float  # seconds this run may take from `started` (0 = no limit)
    cpus_per_trial: float  # what one Tune trial (a pack: all its proposals) holds
    skipped: int = 0  # proposals told to Optuna untrained in this run
    # the smallest verified model: params, exact_match (verified), entry_id, trial_id
    incumbent: dict | None = None


@dataclass
class SearchSummary:
    name: str
    dir: str
    task: str
    target: float
    n_trials: int
    n_feasible: int
    n_errored: int
    best: dict | None  # params, exact_match, trial_id, entry_id, verified_em, checkpoint
    frontier: list[tuple[int, float]]  # Pareto points (params, best exact match)
    verified: list[dict]
    skipped: list[dict]  # proposals told to Optuna untrained: at or above the bound
    incumbent: int | None  # smallest verified parameter count
    trained_above_incumbent: list[str]  # trial ids started at or above an existing incumbent
    architectures: list[dict]  # per architecture: seeds that reached the target / trained
    plot: str | None
    mlflow_uri: str
    mlflow_experiment_id: str
    study_storage: str
    study_name: str
    trials: list[dict] = field(default_factory=list)  # one row per proposal
    wall_time: float = 0.0  # this run (a resumed search: the latest `--resume`)
    # every finished run of this search, the first and each resume (a run killed before it
    # wrote its summary is not counted)
    total_wall_time: float = 0.0
    # trials' own wall time x their CPUs, summed: what the proposals cost, whatever ran at once
    cpu_hours: float = 0.0
    n_tune_trials: int = 0  # Ray Tune trials (packs); n_trials counts proposals
    largest_pack: int = 1  # most proposals one Tune trial trained together
    # near misses this run's deadline cut, below the incumbent: `--resume` trains them again
    # first (arithsweep.search.trials.replay); `replayed`: the trial ids this run trained again
    cut_near_misses: list[dict] = field(default_factory=list)
    replayed: list[str] = field(default_factory=list)
    # --from-entry: the entry it started from and how it mapped (search.json's "from_entry")
    from_entry: dict | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
