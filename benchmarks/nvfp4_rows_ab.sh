#!/usr/bin/env bash
# NVFP4 along rows, A/B of nvfp4_row_kernel's forms in one device call (fifty-third session):
#   OUT=/path bash benchmarks/nvfp4_rows_ab.sh
# Carry build-cuda/libs.tar.xz holding libmxprec_cuda.so and any build-cuda/ab/NAME.so to compare (the fifty-third
# session's: ab/old.so, the fifty-second session's library, one CTA per item; ab/mask.so, the same source built with
# -DMXPREC_NVFP4_COUNT=0, the binary search). First the NVFP4 GPU tests on each library of TEST_LIBS (default "new":
# libmxprec_cuda.so), then benchmarks/cuda_quantize.py per library:MXPREC_NVFP4_ROW_WAVES setting of CONFIGS
# (e.g. "old:0 new:1 new:2"), ROUNDS rounds (default 2), interleaved. A third field sets MXPREC_NVFP4_ONCHIP
# (fifty-fourth session; e.g. "new:1:0 new:1:2"; empty: unset, the library's default).
set -u
export PYTHONPATH="$PWD/src:$PWD/tests" PYTHONUNBUFFERED=1
R="$OUT/r"
mkdir -p "$R"
(cd build-cuda && xz -dc libs.tar.xz | tar xf -) || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$R/smi.txt"
B="$PWD/build-cuda"
lib_path() { if [ "$1" = new ]; then echo "$B/libmxprec_cuda.so"; else echo "$B/ab/$1.so"; fi; }
for lib in ${TEST_LIBS:-new}; do
  MXPREC_CUDA_LIBRARY="$(lib_path $lib)" timeout 200 python3 -m pytest -q -p no:cacheprovider \
    tests/test_cuda_quantize.py -k "${TESTS_K:-nvfp4 or limit}" > "$R/tests_$lib.log" 2>&1 &
done
wait
for lib in ${TEST_LIBS:-new}; do echo "tests $lib: $(tail -n 1 "$R/tests_$lib.log")"; done
for ((r = 1; r <= ${ROUNDS:-2}; r++)); do
  for cfg in ${CONFIGS:-old:0 new:0 new:1 new:2}; do
    IFS=: read -r lib w o <<< "$cfg"
    t="${lib}_w${w}${o:+_o$o}_$r"
    MXPREC_NVFP4_ONCHIP="${o:-}" MXPREC_NVFP4_ROW_WAVES="$w" MXPREC_CUDA_LIBRARY="$(lib_path "$lib")" timeout 100 \
      python3 benchmarks/cuda_quantize.py --no-peer --kernels nvfp4 --shapes "${SHAPES:-16384x4096,8192x8192,4096x4096}" \
      --out "$R/q_$t" > "$R/q_$t.log" 2>&1
    echo "$t: $(grep '| nvfp4' "$R/q_$t/cuda_quantize.md" | awk -F'|' '{printf "%s/%s %s %s%%  ", $2, $3, $6, $8}')"
  done
done
(cd "$OUT" && tar czf results.tgz r)
