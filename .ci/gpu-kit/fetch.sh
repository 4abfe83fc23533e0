#!/usr/bin/env bash
# The GPU kit, this side: download exactly the wheels of .ci/gpu-kit/wheels.txt (cp312 manylinux x86-64, or
# py3-none-any) into .whl/ at the repo root (gitignored), which the device call carries (`carry: [".whl"]`).
# A wheel already there is kept; a wheel there that the list does not name is removed (two versions of one
# name stop the install there). Refuses in one line, exit 1, when a listed wheel is missing or the wheels come to
# more than the limit (64 MiB, what one call carries; the course's own files travel too and are counted with them).
#
# Environment: TC_KIT_WHL (the folder, default .whl), TC_KIT_LIMIT_MIB (default 64), TC_KIT_NO_DOWNLOAD=1 (check
# only: a missing wheel is refused, nothing is downloaded), PYTHON (the pip to download with, default python3).
set -euo pipefail
cd "$(dirname "$0")/../.."
list=.ci/gpu-kit/wheels.txt
dest=${TC_KIT_WHL:-.whl}
limit_mib=${TC_KIT_LIMIT_MIB:-64}
py=${PYTHON:-python3}
mkdir -p "$dest"
norm() { echo "$1" | tr 'A-Z' 'a-z' | sed -E 's/[-_.]+/_/g'; }

mapfile -t specs < <(sed -E 's/#.*//; s/[[:space:]]+//g' "$list" | grep -v '^$')
declare -A want=()
for spec in "${specs[@]}"; do
    name=${spec%%==*} ver=${spec#*==}
    [[ "$spec" == *==* && -n "$name" && -n "$ver" ]] || { echo "fetch: $list: '$spec' is not name==version"; exit 1; }
    key=$(norm "$name")
    [ -z "${want[$key]:-}" ] || { echo "fetch: $list names $name twice (one version each)"; exit 1; }
    want[$key]=$ver
done

for f in "$dest"/*.whl; do
    [ -e "$f" ] || continue  # exactly the list: anything else there is removed
    IFS=- read -r fname fver _ <<< "$(basename "$f")"
    if [ "${want[$(norm "$fname")]:-}" != "$fver" ]; then echo "fetch: removing $(basename "$f") (not in $list)"; rm -f "$f"; fi
done

declare -A present=()  # normalised name -> "version file" of each wheel in $dest
scan() {
    local f fname fver _
    present=()
    for f in "$dest"/*.whl; do
        [ -e "$f" ] || continue
        IFS=- read -r fname fver _ <<< "$(basename "$f")"
        present[$(norm "$fname")]="$fver $f"
    done
}
have() { local p=${present[$(norm "$1")]:-}; [ "${p%% *}" = "$2" ]; }  # is name $1 version $2 in $dest?

scan
todo=()
for spec in "${specs[@]}"; do
    have "${spec%%==*}" "${spec#*==}" || todo+=("$spec")
done
if [ "${#todo[@]}" -gt 0 ] && [ "${TC_KIT_NO_DOWNLOAD:-0}" != 1 ]; then
    echo "fetch: downloading ${#todo[@]} wheels into $dest"
    "$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
        -d "$dest" "${todo[@]}" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
    scan
fi

missing=()
for spec in "${specs[@]}"; do
    have "${spec%%==*}" "${spec#*==}" || missing+=("$spec")
done
[ "${#missing[@]}" -eq 0 ] || { echo "fetch: refused: ${#missing[@]} listed wheels are missing from $dest: ${missing[*]}"; exit 1; }


bytes=$(cat "$dest"/*.whl | wc -c)
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
if [ "$bytes" -gt $(( limit_mib * 1048576 )) ]; then
    echo "fetch: refused: the ${#specs[@]} wheels come to $mib MiB, over the $limit_mib MiB one device call carries"
    exit 1
fi
tree=0
if git rev-parse --git-dir >/dev/null 2>&1; then  # what travels besides: tracked and untracked-not-ignored files
    tree=$(git ls-files -z -co --exclude-standard | xargs -0 cat 2>/dev/null | wc -c)
fi
if [ $(( bytes + tree )) -gt $(( limit_mib * 1048576 )) ]; then
    echo "fetch: refused: the wheels ($mib MiB) and the course's files ($(( tree / 1048576 )) MiB) come to more than" \
        "the $limit_mib MiB one device call carries"
    exit 1
fi
echo "fetch: ${#specs[@]} wheels in $dest, $mib MiB in total (limit $limit_mib MiB; the course's files add" \
    "$(awk -v b="$tree" 'BEGIN { printf "%.1f", b / 1048576 }') MiB)"
