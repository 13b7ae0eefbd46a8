#!/usr/bin/env bash
# A history of 12 commits run by asv on the VM, twice: commits 1-8 the same benchmark code (3 and 4 with a
# core held by `yes > /dev/null`), 9-12 with the MLP of the model workload one width x width layer deeper
# (library code: four such layers instead of three, a third more work in its forward pass). Each commit is
# run once in a first round over all twelve and once more in a second round with asv's --append-samples,
# so each commit's figure is the median of the samples of two runs some minutes apart.
set -euo pipefail
REPO=${REPO:-/work/main}
BASE=${BASE:-$(git -C "$REPO" rev-parse HEAD)}
WT=/tmp/hist
OUT=${OUT:-/tmp/histrun}
N=12
PLANT=9
HELD="3 4"
BENCH="DeviceCopy.track_gbps_copied\('cpu', 67108864\)|MatmulAchievable.track_tflops\('cpu', 'float32', 'burst'\)|LogNorms.time_loop\('cpu', '(per_step_item|on_device)', 100, 100\)|MatmulSquare.track_tflops\('cpu', 'float32', (256|1024)\)|Forward.time_forward\('cpu', 'mlp'\)"
mkdir -p "$OUT"
rm -rf "$WT" "$OUT/results"; git -C "$REPO" worktree prune
git -C "$REPO" worktree add -q --detach "$WT" "$BASE"
sed -e "s#\"repo\": \".\"#\"repo\": \"$WT\"#; s#\"benchmark_dir\": \"benchmarks\"#\"benchmark_dir\": \"$WT/benchmarks\"#; s#\"env_dir\": \".asv/env\"#\"env_dir\": \"$OUT/env\"#; s#\"results_dir\": \".asv/results\"#\"results_dir\": \"$OUT/results\"#; s#\"html_dir\": \".asv/html\"#\"html_dir\": \"$OUT/html\"#" "$REPO/asv.conf.json" > "$OUT/asv.conf.json"
cd "$WT"
hashes=()
for i in $(seq 1 $N); do
  if [ "$i" = "$PLANT" ]; then
    python3 - <<'PY'
p = "src/devbench/workloads/model.py"
c = open(p).read()
old = "            nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),\n"
assert old in c
c = c.replace(old, old + "            nn.Linear(width, width), nn.ReLU(),  # planted: a third more work\n")
open(p, "w").write(c)
PY
  fi
  echo "history $i" > HISTORY.txt
  git add -A
  GIT_COMMITTER_DATE="2026-11-26T$(printf %02d $i):00:00" GIT_AUTHOR_DATE="2026-11-26T$(printf %02d $i):00:00" git commit -qm "history $i"
  hashes+=("$(git rev-parse HEAD)")
done
for round in 1 2; do
  append=""
  [ "$round" = 2 ] && append="--append-samples"
  for i in $(seq 1 $N); do
    H=${hashes[$((i - 1))]}
    git checkout -q --detach "$H"
    held=""
    if [[ " $HELD " == *" $i "* ]]; then yes > /dev/null & held=$!; fi
    start=$(date +%s)
    ASV_PYTHONPATH="$WT/src" "$REPO/.venv/bin/python" -m asv run --config "$OUT/asv.conf.json" -E "existing:$REPO/.venv/bin/python" \
        --set-commit-hash "$H" --machine vm --record-samples $append --bench "$BENCH" > "$OUT/asv-$round-$i.log" 2>&1
    [ -n "$held" ] && kill "$held"
    echo "round $round commit $i ${H:0:8} $( [ -n "$held" ] && echo 'core held' || echo idle ) $(date -u +%H:%M:%S) $(( $(date +%s) - start )) s"
  done
done
