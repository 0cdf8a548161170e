#!/bin/bash
# tbukic's 35-p shape (the 36 with down = up^T, no turning angle: its sweep's 35p_..._downUpT)
# through the 36's whole path here: the cosine phase, then the Grokfast phase from every seed's
# state. One pack of 64 seeds from seed $1 (0 and 64 here, one per core): ./run.sh 0; ./run.sh 64
set -e
cd "$(dirname "$0")"
S=${1:?first seed of the pack, e.g. 0}
A=${ARITHSWEEP:-arithsweep}
NET=(--config ../../recipes/anchors/tbukic-36.yaml --set mlp_down=up_t --seeds 64 --seed "$S")
OMP_NUM_THREADS=1 $A train "${NET[@]}" --out "s$S" --log "s$S.log" --json > "s$S.json"
OMP_NUM_THREADS=1 $A train "${NET[@]}" --init-from "s$S/resume" --set steps=100000 --set lr=0.001 \
  --set min_lr_ratio=0.1 --set grokfast_lambda=3.0 --set curriculum=null --set cosine_from=0 \
  --out "g$S" --log "g$S.log" --json > "g$S.json"
