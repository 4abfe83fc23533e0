#!/usr/bin/env bash
# The GPU kit, the device side: run from the repo root on the GPU machine, with the wheels of .ci/gpu-kit/wheels.txt
# carried in .whl/ (the image has torch, numpy, onnx, onnxruntime... but no Jupyter and no torchao, and no registry).
#
#   bash .ci/gpu-kit/run.sh [--rehearsal] [more options of `torchcontracts record`]
#
# 1. installs the carried wheels with --no-index --no-deps into one folder ($TC_SITE, default /tmp/site) and puts it
#    and the course's helpers/ on PYTHONPATH (the course itself is not installed: nothing there can build it);
# 2. runs `python3 -m torchcontracts.cli record`, which writes into $OUT: gpu_record.json (the record; with
#    --rehearsal, gpu_rehearsal.json), progress.jsonl (one line per lesson and comparison as each finishes, then an
#    "end" line: a run cut off at its limit still says where it stopped) and record.log (everything it printed).
# On the GPU the lessons and comparisons get TC_BUDGET seconds (default 450) to start in, and the whole record
# TC_LIMIT seconds (default 570) before it is stopped, inside the device call's 600. A rehearsal runs every lesson
# whatever the time (it prints each one's time against the record's 480 s budget), stopped after TC_LIMIT (default 1800).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?run.sh writes into \$OUT: set it to a folder}"
mkdir -p "$OUT"
site=${TC_SITE:-/tmp/site}
log="$OUT/record.log"
t0=$(date +%s)
mode=gpu name=gpu_record.json limit=${TC_LIMIT:-570} budget=(--budget "${TC_BUDGET:-450}")
if [ "${1:-}" = --rehearsal ]; then mode=rehearsal name=gpu_rehearsal.json limit=${TC_LIMIT:-1800} budget=(); fi
{
    echo "run.sh: $mode on $(hostname), $(date -u +%FT%TZ); python3 is $(command -v python3)"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
} > "$log" 2>&1
ls .whl/*.whl >/dev/null 2>&1 || { echo "run.sh: no wheels in .whl/ (run .ci/gpu-kit/fetch.sh here, carry .whl)" | tee -a "$log"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl \
    >> "$log" 2>&1 || { echo "run.sh: installing the carried wheels failed (see $log)" | tee -a "$log"; exit 1; }
export PYTHONPATH="$site:$PWD/helpers${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 JUPYTER_PLATFORM_DIRS=1
unset TORCHCONTRACTS_EXEC_CACHE TORCHCONTRACTS_GPU_RECORD
echo "run.sh: wheels installed into $site in $(( $(date +%s) - t0 )) s; torch $(python3 -c 'import torch; print(torch.__version__, "cuda", torch.cuda.is_available())')" | tee -a "$log"
timeout -s KILL "$limit" python3 -m torchcontracts.cli record --quiet "${budget[@]}" \
    --out "$OUT/$name" --progress "$OUT/progress.jsonl" "$@" 2>&1 | tee -a "$log"
rc=${PIPESTATUS[0]}
# KILL, for the whole process group (the lessons' kernels too): its last "begin" line names the lesson it stopped in
[ "$rc" = 137 ] && echo "run.sh: stopped at $limit s; progress.jsonl says where" | tee -a "$log"
echo "run.sh: $mode exit $rc after $(( $(date +%s) - t0 )) s" | tee -a "$log"
exit "$rc"
