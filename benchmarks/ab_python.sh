#!/usr/bin/env bash
# Same-call A/B of a Python-only change in the Llama step: the working tree's src/ ("new") against a copy of the
# old sources in ab_old/src ("old"; e.g. `git archive <commit> src | tar x -C ab_old`; git-ignored, so carry it),
# both on the carried build-cuda/libmxprec_cuda.so. Usage: OUT=DIR bash benchmarks/ab_python.sh ARMS [ROUNDS]
# (ARMS comma-separated; ROUNDS default 2, old and new alternating per arm). Results: $OUT/r/<old|new>_<arm>_<round>/
set -uo pipefail
: "${OUT:?set OUT}"
IFS=, read -r -a arms <<< "${1:?ARMS}"
rounds="${2:-2}"
lib="$PWD/build-cuda/libmxprec_cuda.so"
mkdir -p "$OUT/r"
for ((round = 1; round <= rounds; round++)); do
  for arm in "${arms[@]}"; do
    for v in old new; do
      src="$PWD/src"; [ "$v" = old ] && src="$PWD/ab_old/src"
      name="${v}_${arm}_$round"
      PYTHONPATH="$src" MXPREC_CUDA_LIBRARY="$lib" timeout "${STEP_TIMEOUT:-150}" python3 -m mxprec.bench llama \
        --config "${CONFIG:-llama3_8b_4layer}" --arms "$arm" --isolate off --no-progress --out "$OUT/r/$name" \
        > "$OUT/r/$name.log" 2>&1
      echo "== $name rc=$? $(grep -o '| '"$arm"' | [0-9.]* |' "$OUT/r/$name/"*.md 2>/dev/null | head -1)"
      tar czf "$OUT/results.tgz" -C "$OUT" r
    done
  done
done
