#!/bin/bash
# tbukic's 35-p shape (the 36 with down = up^T, no turning angle: its sweep's 35p_..._downUpT)
# through the 36's whole path here: cosine phase, then the Grokfast phase from every seed's state
set -e
cd /work/main/studies/tbukic35
A=/work/main/.venv/bin/arithsweep
OMP_NUM_THREADS=1 $A train --config /work/main/recipes/anchors/tbukic-36.yaml --set mlp_down=up_t \
  --seeds 64 --seed 0 --out s0 --log s0.log --json > s0.json 2> s0.err
OMP_NUM_THREADS=1 $A train --config /work/main/recipes/anchors/tbukic-36.yaml --set mlp_down=up_t \
  --seeds 64 --seed 0 --init-from s0/resume --set steps=100000 --set lr=0.001 --set min_lr_ratio=0.1 \
  --set grokfast_lambda=3.0 --set curriculum=null --set cosine_from=0 --out g0 --log g0.log --json > g0.json 2> g0.err
echo done > done
