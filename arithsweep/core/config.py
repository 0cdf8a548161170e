"""Every configuration dataclass, validated, with the ONE set of defaults: where to import them.

`ModelConfig` describes an architecture in the searched family (core/model_config.py),
`TrainConfig` one training run of K packed seeds (core/train_config.py); both read and write
plain dicts through `DictConfig` (core/config_base.py). Their field defaults *are* what
`arithsweep train` does with no options (1 layer, d_model 16, 2 heads, d_ff 32, relu,
LayerNorm, tied embeddings, learned positions; 3000 steps of batch 128 per seed at lr 1e-2,
4 seeds): reaches 99%+ exact match on add3 in about half a minute on a 2-core CPU. Search
spaces, checkpoints and `--set` override fields; nothing else holds a second copy of a default.

This module only re-exports those three, so `from arithsweep.core.config import ...` keeps
naming everything it always has (old pickles of `arithsweep.core.config.ModelConfig` included).
Torch-free on purpose, so that search spaces, the CLI and `arithsweep params` validate a
configuration without importing torch. Errors name the field (`ConfigError`).

    python -c "from arithsweep.core.config import ModelConfig, TrainConfig; \
        print(ModelConfig(vocab_size=12, n_ctx=11).summary(), TrainConfig())"
"""

from __future__ import annotations

from arithsweep.core.config_base import C, DictConfig
from arithsweep.core.model_config import (
    ABACUS_POSITIONS,
    ACTIVATIONS,
    EMBEDS,
    MLP_DOWN,
    MODEL_WORDS,
    NORM_WEIGHTS,
    NORMS,
    POSITIONS,
    QK_NORMS,
    ROPE_PAIRS,
    TIE_K,
    ModelConfig,
)
from arithsweep.core.train_config import (
    LAYOUTS,
    LEGACY_TRAIN_DEFAULTS,
    MAX_SEEDS,
    SAMPLERS,
    SAMPLINGS,
    TrainConfig,
)

__all__ = [
    "ABACUS_POSITIONS",
    "ACTIVATIONS",
    "C",
    "DictConfig",
    "EMBEDS",
    "LAYOUTS",
    "LEGACY_TRAIN_DEFAULTS",
    "MAX_SEEDS",
    "MLP_DOWN",
    "MODEL_WORDS",
    "ModelConfig",
    "NORM_WEIGHTS",
    "NORMS",
    "POSITIONS",
    "QK_NORMS",
    "ROPE_PAIRS",
    "SAMPLERS",
    "SAMPLINGS",
    "TIE_K",
    "TrainConfig",
]
