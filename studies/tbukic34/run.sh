#!/bin/bash
# The 34-p shape the default add10 search proposed below the 36 (the 36 with one number for
# its shared norm gain: `--set norm_weight=scalar`), taken on from the search's best model
# (search-best/: seed 54 of 64 after the search's two rounds, 83.6% held-out) through the 36's
# Grokfast phase: two packs of 32 members from that one model (each member its own data), then
# the same phase from the better pack's best (g0b), from g0b's best twice more (g0c; g0d at a
# third of the lr), from g0d's best twice (g0e at a third, g0f at a tenth of the lr), and the
# finishers on g0's best.
#   ./run.sh        # about 12 minutes a pack on one core
set -e
cd "$(dirname "$0")"
A=${ARITHSWEEP:-arithsweep}
NET=(--config ../../recipes/anchors/tbukic-36.yaml --set norm_weight=scalar --seeds 32)
PHASE=(--set steps=100000 --set lr=0.001 --set min_lr_ratio=0.1 --set grokfast_lambda=3.0
       --set curriculum=null --set cosine_from=0)
for S in 0 32; do
  OMP_NUM_THREADS=1 $A train "${NET[@]}" --seed "$S" --init-from search-best "${PHASE[@]}" \
    --out "g$S" --log "g$S.log" --json > "g$S.json"
done
OMP_NUM_THREADS=1 $A train "${NET[@]}" --seed 64 --init-from g0 "${PHASE[@]}" \
  --out g0b --log g0b.log --json > g0b.json
# from g0b's best: the same phase (g0c), and at lr 3e-4 -> 3e-5 (g0d)
OMP_NUM_THREADS=1 $A train "${NET[@]}" --seed 96 --init-from g0b "${PHASE[@]}" \
  --out g0c --log g0c.log --json > g0c.json
OMP_NUM_THREADS=1 $A train "${NET[@]}" --seed 96 --init-from g0b "${PHASE[@]}" --set lr=0.0003 \
  --out g0d --log g0d.log --json > g0d.json
# from g0d's best: a third of the lr again (g0e) and a tenth (g0f)
OMP_NUM_THREADS=1 $A train "${NET[@]}" --seed 128 --init-from g0d "${PHASE[@]}" --set lr=0.0003 \
  --out g0e --log g0e.log --json > g0e.json
OMP_NUM_THREADS=1 $A train "${NET[@]}" --seed 128 --init-from g0d "${PHASE[@]}" --set lr=0.0001 \
  --out g0f --log g0f.log --json > g0f.json
OMP_NUM_THREADS=1 $A finish g0 --out g0-finished --set finish_rounds=3 --set finish_lr=1e-4 \
  --set finish_cmaes_evals=3000 --json > g0-finished.json
# the same hand path as one command (path.yaml): phases and selection automated
OMP_NUM_THREADS=1 $A train --config path.yaml --init-from search-best --out auto --log auto.log \
  --json > auto.json
