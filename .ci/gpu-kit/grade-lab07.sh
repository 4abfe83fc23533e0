#!/usr/bin/env bash
# The GPU kit, the device side, after run.sh: grade lab 07's reference and one wrong answer on the GPU machine.
#
#   bash .ci/gpu-kit/grade-lab07.sh
#
# Why on a GPU: there, the kernel's first backward stops every later fork from running backward (a CUDA build with a
# visible GPU), which once failed correct lab 07 answers. The wrong answer is the reference without the shard weight
# (a plain mean loss per rank), which is right only for equal shards, so t1's hidden cases must fail it.
# Uses the wheels run.sh installed ($TC_SITE, default /tmp/site); writes lab07-<name>.json and grade.log into $OUT.
# The image has no bubblewrap, so the grade runs with --sandbox auto (none there: the sandbox is not what is tested).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?grade-lab07.sh writes into \$OUT: set it to a folder}"
site=${TC_SITE:-/tmp/site}
export PYTHONUNBUFFERED=1 JUPYTER_PLATFORM_DIRS=1
work=$(mktemp -d /tmp/tc-lab07.XXXXXX)
# The grader starts its kernels with a clean environment (no PYTHONPATH), so the wheels and the course go on the
# path of a new venv (a .pth file, beside the image's own site-packages: its python3 is itself a venv's), whose
# python3 the kernels then inherit.
image_site=$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
python3 -m venv --without-pip "$work/venv"
printf '%s\n' "$site" "$PWD/helpers" "$image_site" > "$("$work/venv/bin/python3" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/tc-kit.pth"
PATH="$work/venv/bin:$PATH"
cp solutions/lab07_ddp.ipynb "$work/reference.ipynb"
python3 - "$work/reference.ipynb" "$work/wrong_shard_weight.ipynb" <<'EOF'
import json, sys
nb = json.load(open(sys.argv[1]))
old = "F.mse_loss(ddp(x), y) * (x.shape[0] * world_size / n_global)"
hits = [c for c in nb["cells"] if old in "".join(c["source"])]
assert len(hits) == 1, "the reference's t1 line moved: update grade-lab07.sh"
hits[0]["source"] = "".join(hits[0]["source"]).replace(old, "F.mse_loss(ddp(x), y)")
json.dump(nb, open(sys.argv[2], "w"))
EOF
rc=0
for name in reference wrong_shard_weight; do
    t0=$(date +%s)
    timeout -s KILL 90 python3 -m torchcontracts.cli grade --lab lab07_ddp --quiet --json --seed 7 \
        "$work/$name.ipynb" > "$OUT/lab07-$name.json" 2>> "$OUT/grade.log" || rc=$?
    python3 - "$OUT/lab07-$name.json" "$name" "$(( $(date +%s) - t0 ))" <<'EOF' | tee -a "$OUT/grade.log"
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:  # noqa: BLE001 - a one-line reason, whatever went wrong
    print(f"grade-lab07: {sys.argv[2]}: no result ({type(e).__name__})")
    raise SystemExit(0)
r = r[0] if isinstance(r, list) else r
tasks = {t["id"]: f"{t['score']:g}/{t['max_score']:g}" for t in r["tasks"]}
print(f"grade-lab07: {sys.argv[2]}: {r.get('score')} of {r.get('max_score')} in {sys.argv[3]} s; tasks {tasks}; "
      f"sandbox {r.get('sandbox')}")
EOF
done
exit "$rc"
