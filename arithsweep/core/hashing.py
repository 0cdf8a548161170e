"""The sha256 of a file, the identity of a checkpoint's weights everywhere in arithsweep.

Checkpoints record it (`weights_sha256`), loading checks it, the leaderboard keys entries by it
and `publish` checks every copy against it. Torch-free, so the leaderboard's fast paths can
use it without loading torch.

    python -c "from arithsweep.core.hashing import sha256_file; \
        print(sha256_file('leaderboard/checkpoints/add2-216-52b633c5/model.safetensors'))"
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of the file at `path`, read in 1 MiB blocks (weights may be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
