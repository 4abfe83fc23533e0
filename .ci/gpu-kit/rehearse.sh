#!/usr/bin/env bash
# The GPU kit's CPU rehearsal: build an environment like the H200 image HERE, then run run.sh --rehearsal in it
# exactly as the device would (the carried wheels installed with --target, the course on PYTHONPATH, OUT a folder).
#
#   .ci/gpu-kit/rehearse.sh [VENV]    VENV: a venv to build once and reuse (default: a temporary one, removed after)
#
# The venv holds only what the image holds that `record` needs: Python 3.12, torch==2.11.0 (pip's default build on
# Linux, the CUDA one; there is no GPU here, so CUDA is simply unavailable) and the image's versions of numpy, onnx,
# onnxruntime, onnxscript, pandas, matplotlib, tqdm, psutil... Nothing of Jupyter: that comes from the kit's wheels.
# Exits non-zero when a lesson fails, and prints what it measured (env build, wheels, per-lesson times, total).
set -euo pipefail
cd "$(dirname "$0")/../.."
KIT=.ci/gpu-kit
PY312=${TC_PY312:-$HOME/.pyenv/versions/3.12.1/bin/python}
# The image's versions (KINDS.md, "pip list"); the rest are unpinned there too. onnxruntime 1.30.0 is in the mirror.
IMAGE_PKGS="torch==2.11.0 numpy==2.5.2 onnx==1.23.1 onnxruntime==1.30.0 onnxscript==0.7.2 onnx-ir==1.0.0 pandas
 matplotlib tqdm psutil packaging pyyaml jinja2 pygments typing-extensions attrs setuptools"
venv=${1:-}
keep=1
if [ -z "$venv" ]; then venv=$(mktemp -d /tmp/tc-gpukit-venv.XXXXXX); keep=0; fi
stamp="$venv/.gpukit-image"  # what the venv was built with: a cached venv is reused only for the same list
t0=$(date +%s)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$IMAGE_PKGS" ] && [ -x "$venv/bin/python3" ]; then
    echo "rehearse: reusing the image-like venv $venv"
else
    if [ -e "$venv" ] && [ ! -f "$stamp" ] && [ -n "$(ls -A "$venv" 2>/dev/null)" ]; then
        echo "rehearse: refused: $venv is not empty and not a venv this script built: give a new path"; exit 1
    fi
    rm -rf "$venv"
    "$PY312" -m venv "$venv"
    # shellcheck disable=SC2086
    "$venv/bin/python3" -m pip install -q --disable-pip-version-check $IMAGE_PKGS 2>&1 \
        | { grep -v "is ignored: it is neither a file nor a directory" || true; }
    echo "$IMAGE_PKGS" > "$stamp"
    echo "rehearse: built the image-like venv $venv in $(( $(date +%s) - t0 )) s"
fi
for gone in jupyter_client ipykernel nbclient nbformat ipywidgets torchao; do  # the image has none of these
    if "$venv/bin/python3" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$gone') is None)"; then
        echo "rehearse: the venv has $gone, which the image lacks: not a faithful rehearsal"; exit 1
    fi
done
t1=$(date +%s)
PYTHON=${PYTHON:-$venv/bin/python3} bash "$KIT/fetch.sh"  # the venv's pip downloads (python3 may have none)
echo "rehearse: wheels ready in $(( $(date +%s) - t1 )) s"
out=$(mktemp -d /tmp/tc-gpukit-out.XXXXXX)
site=$(mktemp -d /tmp/tc-gpukit-site.XXXXXX)
t2=$(date +%s)
rc=0
# What the device runs, with the venv's python3 first on PATH (there, python3 is the image's).
PATH="$venv/bin:$PATH" OUT="$out" TC_SITE="$site" bash "$KIT/run.sh" --rehearsal || rc=$?
echo "rehearse: run.sh --rehearsal: exit $rc in $(( $(date +%s) - t2 )) s; OUT kept in $out:"
ls -l "$out"
rm -rf "$site"
[ "$keep" = 1 ] || rm -rf "$venv"
exit "$rc"
