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
    space/        file, values, fields, spaces: the YAML format and its Optuna face
    basics        options (SearchOptions: every default, the trial cap; progress, summary),
                  run_settings (the running search's registry and its stoppers), snapshots
                  (Tune's snapshot kept whole), cluster (starting or joining Ray)

    basics <- space <- trials <- propose <- report <- the run

Each room's docstring says what its modules are for. `arithsweep search --help`;
docs/search-internals.md walks through a search.
"""

import importlib
import importlib.machinery
import sys

# Where each module of the wing went when it was given rooms (issue 57). A search made before
# pickled these names (tuner.pkl, searcher-state-*.pkl, the search generator's state and the
# trainable Tune registers: classes and functions are pickled by module and name), so each old
# name still imports, as the very module object it moved to: `pickle` finds
# arithsweep.search.trainable.run_trial and gets arithsweep.search.trials.trainable's. Nothing is
# imported before an old name is asked for; the package itself imports only names below it.
MOVED = {
    "searcher": "propose.searcher", "proposing": "propose.proposing",
    "bounding": "propose.bounding", "shrink": "propose.shrink", "telling": "propose.telling",
    "incumbent": "propose.incumbent", "verdicts": "propose.verdicts",
    "live": "report.live", "tracking": "report.tracking", "results": "report.results",
    "plots": "report.plots",
    "space_file": "space.file", "space_fields": "space.fields", "spaces": "space.spaces",
    "trainable": "trials.trainable", "trial": "trials.configs", "trial_state": "trials.state",
    "rounds": "trials.rounds", "plateau": "trials.plateau", "packs": "trials.packs",
    "replay": "trials.replay", "cores": "trials.cores",
}


class _MovedModules:
    """A meta-path finder and loader for the old names: the spec of `arithsweep.search.<old>`
    loads the module `arithsweep.search.<room>.<new>` and stands for it in sys.modules."""

    def find_spec(self, name: str, path: object = None, target: object = None):
        head, _, old = name.rpartition(".")
        if head != __name__ or old not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec):
        return importlib.import_module(f"{__name__}.{MOVED[spec.name.rpartition('.')[2]]}")

    def exec_module(self, module) -> None:
        """The module it names is loaded already (create_module)."""


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())
