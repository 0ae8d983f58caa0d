#!/usr/bin/env bash
# Fill .gpu-wheels/ (git-ignored) with the wheels `make gpu-check` needs on a GPU machine that
# has no network, beyond what such a machine's own Python holds (torch, accelerate), for
# CPython 3.12 on x86-64 Linux: the pinned transformers, tokenizers and peft (a GPU image
# brings its own versions; the check is of the pinned ones), bitsandbytes (QLoRA) and
# faiss-cpu (the reference of the GPU search and of the neighbour tests), plus the regex that
# transformers checks for at import. bitsandbytes ships one kernel library per CUDA release
# (129 MB unpacked); the copy kept here holds only the CPU library and the CUDA 13.x ones
# (torch 2.13's CUDA), so that the folder (44 MB) stays under the 64 MiB that a carried folder
# may hold. ctranslate2 (43 MB) is fetched only with --with-ctranslate2, in place of faiss.
#   bash benchmarks/gpu_wheels.sh [--with-ctranslate2] [--python-version 3.12]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PYVER=3.12
CT2=0
while [ $# -gt 0 ]; do
    case "$1" in
        --with-ctranslate2) CT2=1 ;;
        --python-version) PYVER=$2; shift ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
OUT=.gpu-wheels
# The pins of requirements.txt, read from there so that they are declared once.
pin() { grep -E "^$1==" requirements.txt | head -1; }
rm -rf "$OUT" && mkdir -p "$OUT"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
    platforms+=(--platform "$p")
done
wanted=("$(pin transformers)" "$(pin tokenizers)" "$(pin peft)" "$(pin bitsandbytes)" "regex>=2025.10.22")
if [ "$CT2" = 1 ]; then wanted+=("$(pin ctranslate2)"); else wanted+=("$(pin faiss-cpu)"); fi
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    "${platforms[@]}" -d "$OUT" "${wanted[@]}"
# Keep bitsandbytes' CPU and CUDA 13 libraries only (a wheel is a zip; RECORD is rewritten to match).
"$PY" - "$OUT" <<'PY'
import re, sys, zipfile
from pathlib import Path

for wheel in Path(sys.argv[1]).glob("bitsandbytes-*.whl"):
    keep = re.compile(r"libbitsandbytes_(cpu|cuda13\d*)\.so$")
    pruned = wheel.with_suffix(".pruned")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(pruned, "w", zipfile.ZIP_DEFLATED) as dst:
        names = [n for n in src.namelist() if not n.endswith(".so") or keep.search(n)]
        for name in names:
            data = src.read(name)
            if name.endswith(".dist-info/RECORD"):
                data = "".join(
                    line + "\n" for line in data.decode().splitlines() if line.split(",")[0] in names
                ).encode()
            dst.writestr(src.getinfo(name), data)
    pruned.replace(wheel)
PY
du -sh "$OUT"; ls -l "$OUT"
