#!/usr/bin/env bash
# Everything a GPU machine with no package index needs to run the suite, in one ignored folder,
# .devrun/ (`make device-bundle`):
#   wheels/      asv and the pure-Python packages it needs that the GPU image lacks, for its
#                Python (DEVICE_PYTHON, default 3.12: the image's python3) on x86-64 (the image has torch, numpy, pandas, matplotlib, pytest,
#                tabulate, pyarrow, nvidia-ml-py; importlib-metadata 9.x imports a module it lacks)
#   python       the Python version the wheels are for (device-run.sh checks it before installing)
#   repo.bundle  the repository at HEAD as a git bundle: asv reads each commit and its date from git,
#                and a copied working tree carries no .git
# Then, there: bash scripts/device-run.sh MACHINE   (README, "On a GPU machine").
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
PYTHON=${PYTHON:-python3}
DEVICE_PYTHON=${DEVICE_PYTHON:-3.12}
out=.devrun
rm -rf "$out.tmp"
mkdir -p "$out.tmp/wheels"
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$DEVICE_PYTHON" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$out.tmp/wheels" \
    asv==0.6.6 asv-runner==0.2.5 json5 virtualenv pympler importlib-metadata==8.7.0 zipp distlib \
    platformdirs python-discovery filelock 2> >(grep -v '^WARNING: Location' >&2)
git bundle create -q "$out.tmp/repo.bundle" HEAD
git rev-parse HEAD > "$out.tmp/commit"
echo "$DEVICE_PYTHON" > "$out.tmp/python"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$out/: $(ls "$out/wheels" | wc -l) wheels for Python $DEVICE_PYTHON, the repository at $(cut -c1-12 "$out/commit") ($(du -sh "$out" | cut -f1))"
