#!/usr/bin/env bash
# Rehearse a lent GPU machine's one call on this CPU host: scripts/device-run.sh under the GPU image's Python
# (3.12) with a torch that has no asv beside it, from a copy of the working tree without .git (as the device tool
# copies it), .devrun carried, a fresh HOME and cache, and only what the image has installed:
#
#   scripts/research/rehearse-device-run.sh [BUDGET_S]      # default 300; the log and $OUT land in /tmp/rehearse-*
#
# It proves the path, not the GPU: the wheels install, asv and the measuring process find the package through
# PYTHONPATH/ASV_PYTHONPATH, every stage runs and the results are packed. The venv (REHEARSE_VENV, default
# /tmp/dev312) is made on first use with pip (torch's default build, about 3 GB with its CUDA libraries).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
budget=${1:-300}
venv=${REHEARSE_VENV:-/tmp/dev312}
py=${REHEARSE_PYTHON:-python3.12}
if [ ! -x "$venv/bin/python3" ]; then
    "$py" -m venv "$venv"
    # what the GPU image has of what the suite uses (the device tool's KINDS.md), and no asv
    "$venv/bin/pip" install -q torch numpy pandas matplotlib pyarrow pyyaml packaging nvidia-ml-py tabulate \
        pytest pytest-xdist pytest-timeout
fi
have=$("$venv/bin/python3" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
DEVICE_PYTHON=$have make --no-print-directory device-bundle
work=$(mktemp -d /tmp/rehearse-tree.XXXX)
out=$(mktemp -d /tmp/rehearse-out.XXXX)
home=$(mktemp -d /tmp/rehearse-home.XXXX)
# tracked and untracked files that git does not ignore, as the device tool copies a working tree; .devrun carried
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work"
cp -r .devrun "$work/"
echo "rehearse: tree $work, out $out, log $out/log.txt"
cd "$work"
set +e
env -i PATH="$venv/bin:/usr/bin:/bin" HOME="$home" XDG_CACHE_HOME="$home/.cache" OUT="$out" BUDGET_S="$budget" \
    bash scripts/device-run.sh rehearsal >/dev/null 2>&1
code=$?
set -e
cd "$root"  # out of the tree: what is left working there is the run's
grep -E '^(== |gpu-run: |device-run: )' "$out/log.txt" || true
left_in_tree() {  # the processes still working in the tree: a stage's child the run did not end
    for proc in /proc/[0-9]*; do
        case "$(readlink "$proc/cwd" 2>/dev/null)" in "$work"*) echo "${proc#/proc/} $(tr '\0' ' ' < "$proc/cmdline")" ;; esac
    done
}
for _ in 1 2 3 4 5; do  # device-run.sh's log tee ends just after it
    [ -z "$(left_in_tree)" ] && break
    sleep 1
done
echo "rehearse: exit $code; left running in the tree after 5 s: $(left_in_tree | wc -l)"
left_in_tree | cut -c1-160
rm -rf "$work" "$home"
exit "$code"
