#!/usr/bin/env bash
# The whole GPU check in one command, for a lent GPU machine that has torch but no asv
# and no package index. Run from the repository root with the wheels made by
# ../shared/tools/device-wheels.sh (plus `pip wheel --no-deps -w .whl .` for devbench;
# replace its importlib-metadata wheel with 8.7.0: 9.x imports `lazy_importer`, which the
# GPU image lacks) carried in .whl/. asv reads the commit's date from git, and the device
# tool will not carry .git: copy it to an ignored folder and restore it there, replacing
# whatever .git the copy has (it may be at another commit):
#
#   here:  rm -rf .devrun && mkdir .devrun && cp -a .git .devrun/git    (.devrun/ ignored)
#   there: rm -rf .git; cp -a .devrun/git .git; OUT=$OUT scripts/device-run.sh [MACHINE]
#
# Steps, each under its own time limit so one slow step cannot lose the others:
#   1. install the wheels into the machine's python3, record the asv machine (GPU fields)
#   2. the tests that need CUDA, then the rest of the fast tests
#   3. asv run, one module at a time (asv saves a module's results when it ends, so a
#      time limit costs one module, not the run), with --durations
#   4. devbench validate against the results just made
#   5. results, logs and nvidia-smi before/after packed into $OUT
# Environment: BUDGET_S (total seconds, default 540), MODULES (space-separated asv
# --bench regexes, default every module), SKIP_INSTALL=1, SKIP_TESTS=1,
# CUDA_TESTS_ONLY=1, SKIP_VALIDATE=1, PREVIOUS (a results.tgz of an earlier step to
# unpack first, so validate and the report see every step's results).
#
# A short lease: one device call per step, each under 9 minutes, each packing its own
# asv results and GPU state into $OUT/results.tgz (commit them under reports/):
#   STEP=setup    scripts/device-run.sh h100   # install, machine, CUDA tests, fast tests
#   STEP=matmul   scripts/device-run.sh h100   # bench_matmul
#   STEP=transfer scripts/device-run.sh h100   # bench_transfer, class by class
#   STEP=rest     scripts/device-run.sh h100   # logging, parallel, model, devices, collectives
#   STEP=beyond   scripts/device-run.sh h100   # bench_achievable (shape search, burst, sustained), bench_launch
#   STEP=validate PREVIOUS=.devrun/results.tgz scripts/device-run.sh h100   # validate on the matmul and transfer results
# Without STEP (or STEP=all) it does everything in one call, as far as BUDGET_S allows.
set -uo pipefail
export PYTHONUNBUFFERED=1
machine=${1:-gpu}
OUT=${OUT:-/tmp/devbench-out}
mkdir -p "$OUT"
budget=${BUDGET_S:-540}
case "${STEP:-all}" in
    all) ;;
    setup) MODULES=" "; SKIP_VALIDATE=1 ;;
    matmul) MODULES="bench_matmul"; SKIP_TESTS=1; SKIP_VALIDATE=1 ;;
    transfer) MODULES="bench_transfer.(DeviceCopy|PeerCopy|HostDeviceBidirectional)
      bench_transfer.(ManySmallCopies|SameDeviceMove|CopyComputeOverlap|HiddenCopy) bench_transfer.HostDevice\\."
        SKIP_TESTS=1; SKIP_VALIDATE=1 ;;
    rest) MODULES="bench_logging bench_parallel bench_model bench_devices bench_collectives"; SKIP_TESTS=1
        SKIP_VALIDATE=1 ;;
    beyond) MODULES="bench_achievable bench_launch"; SKIP_TESTS=1; SKIP_VALIDATE=1 ;;
    validate) MODULES=" "; SKIP_TESTS=1 ;;
    *) echo "unknown STEP ${STEP}: all, setup, matmul, transfer, rest, beyond or validate"; exit 2 ;;
esac
if [ -n "${PREVIOUS:-}" ]; then tar xzf "$PREVIOUS" || exit 1; fi
# bench_transfer goes class by class (HostDevice alone is 96 combinations) and last.
modules=${MODULES:-"bench_matmul bench_achievable bench_launch bench_logging bench_parallel bench_model bench_devices bench_collectives
  bench_transfer.(DeviceCopy|PeerCopy|HostDeviceBidirectional)
  bench_transfer.(ManySmallCopies|SameDeviceMove|CopyComputeOverlap|HiddenCopy)
  bench_transfer.HostDevice\\."}
t0=$(date +%s)
left() { echo $((budget - ($(date +%s) - t0))); }
log="$OUT/log.txt"
exec > >(tee -a "$log") 2>&1

echo "== install ($(left) s left)"
if [ "${SKIP_INSTALL:-0}" != 1 ] && compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl || exit 1
fi
py=$(command -v python3)
git rev-parse HEAD >/dev/null || { echo "no git checkout here: carry .git"; exit 1; }
nvidia-smi -q -d CLOCK,TEMPERATURE,POWER,PERFORMANCE >"$OUT/smi-before.txt" 2>&1 || true
python3 -m devbench.cli machine --machine "$machine" || exit 1
python3 -m devbench.cli info

if [ "${SKIP_TESTS:-0}" != 1 ]; then
    echo "== tests that need CUDA ($(left) s left)"
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -40
    if [ "${CUDA_TESTS_ONLY:-0}" != 1 ]; then
    echo "== fast tests ($(left) s left)"
    timeout 120 python3 -m pytest -q -p no:cacheprovider -m "not slow and not cuda" -x tests 2>&1 | tail -15
    fi
fi

for m in $modules; do
    # validate takes 7 alternating rounds per figure (about a minute on a GPU host, not measured yet)
    reserve=$([ "${SKIP_VALIDATE:-0}" = 1 ] && echo 15 || echo 120)
    limit=$(( $(left) - reserve ))
    if [ "$limit" -lt 20 ]; then echo "== skip $m: out of time"; continue; fi
    echo "== asv run $m (limit ${limit} s)"
    s=$(date +%s)
    timeout "$limit" python3 -m asv run -E "existing:$py" --machine "$machine" \
        --set-commit-hash "$(git rev-parse HEAD)" --durations 8 --show-stderr --bench "$m"
    echo "== $m: rc $? in $(( $(date +%s) - s )) s"
done

if [ "${SKIP_VALIDATE:-0}" != 1 ] && [ "$(left)" -gt 30 ]; then
    echo "== validate ($(left) s left)"
    timeout $(( $(left) - 10 )) python3 -m devbench.cli validate --machine "$machine" 2>&1 | tee "$OUT/validate.txt"
fi

nvidia-smi -q -d CLOCK,TEMPERATURE,POWER,PERFORMANCE >"$OUT/smi-after.txt" 2>&1 || true
tar czf "$OUT/results.tgz" .asv/results .asv/gpustate .asv/runinfo .asv/achievable .asv/fleet 2>/dev/null
echo "== done in $(( $(date +%s) - t0 )) s"
