#!/usr/bin/env bash
# The whole suite on a GPU machine with torch but no asv and no package index, in one call:
#
#   here:   make device-bundle                      # .devrun/: wheels and the repository as a git bundle
#   there:  bash scripts/device-run.sh MACHINE      # with .devrun carried beside the working tree
#
# It installs the wheels into /tmp/site, makes the working tree a git checkout of the bundled commit
# (asv reads commits from git), and runs `devbench gpu-run` under BUDGET_S (default 480 s: a
# 9-minute call with margin), which prints its plan, runs the suite's headline points then the rest,
# the CUDA tests and `devbench validate`, and packs everything into $OUT (default /tmp/devbench-out)
# with this script's log. Extra arguments go to gpu-run (e.g. --gpu-only, --bench Matmul, --rounds 2).
set -uo pipefail
export PYTHONUNBUFFERED=1
machine=${1:-gpu}
shift || true
OUT=${OUT:-/tmp/devbench-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
cd "$(dirname "$0")/.."
start=$(date +%s)

if [ ! -d .devrun/wheels ] || [ ! -f .devrun/repo.bundle ]; then
    echo "device-run: no .devrun/ here: run 'make device-bundle' first and carry .devrun"
    exit 2
fi
want=$(cat .devrun/python 2>/dev/null || echo 3.12)
have=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo none)
if [ "$want" != "$have" ]; then
    echo "device-run: .devrun/ holds wheels for Python $want, but python3 here is $have:" \
         "run 'DEVICE_PYTHON=$have make device-bundle' and carry .devrun again"
    exit 2
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .devrun/wheels/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD/src"
# asv drops PYTHONPATH from the environment of the processes it starts (discovery, benchmarks) and puts
# ASV_PYTHONPATH in its place: the wheels and this tree's package reach them that way
export ASV_PYTHONPATH="$PYTHONPATH"

# The working tree came without .git, or with one at another commit: take the bundled repository's.
commit=$(cat .devrun/commit)
rm -rf .git /tmp/devbench-git
git clone -q --bare .devrun/repo.bundle /tmp/devbench-git || exit 1
mv /tmp/devbench-git .git
git config core.bare false
git update-ref refs/heads/main "$commit"   # asv.conf.json's branch: asv looks for it
git symbolic-ref HEAD refs/heads/main
git reset -q "$commit" || exit 1
echo "device-run: repository at $(git rev-parse --short HEAD), $(( $(date +%s) - start )) s to install"

# CUDA's device 0 (or the devices CUDA_VISIBLE_DEVICES names, an empty one too) named by its UUID and PCI bus id, as
# the run's records key it; a minute at most
CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES-0}" timeout 60 python3 -m devbench.cli info || true

budget=$(( ${BUDGET_S:-480} - ($(date +%s) - start) ))
python3 -m devbench.cli gpu-run --machine "$machine" --budget-s "$budget" --out "$OUT" "$@"
code=$?
echo "device-run: exit $code after $(( $(date +%s) - start )) s"
exit $code
