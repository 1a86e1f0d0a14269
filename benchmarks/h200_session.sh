#!/usr/bin/env bash
# One device call's worth of GPU work, by stage, with per-step time limits so that a call that runs
# out of time still returns everything finished before (results tarred into $OUT/results.tgz after every
# step: the device tool returns at most a few files, and none written after its limit).
#
#   OUT=/path bash benchmarks/h200_session.sh STAGE [STAGE ...]
#
# Stages (each bounded by `timeout`; order them by priority):
#   cuda-tests   tests/test_cuda.py + tests/test_cuda_quantize.py (needs build-cuda/libmxprec_cuda.so), then
#                the GPU checks of the XLA path (FP8 convert at ties, FP8 GEMMs with FP32 accumulation)
#   gpu-suite    every GPU test file in one call: seven pytest processes at once on the one GPU (no preallocation;
#                shards: test_cuda.py's test ids in four round-robin parts, test_cuda_quantize.py,
#                test_cuda_quantize_transposed.py + test_dot_general.py + test_quantize_api.py + test_llama.py,
#                test_fused_mlp.py),
#                each bounded by STEP_TIMEOUT (an H100 took 255 s in the 62nd session and over 340 s in the 66th:
#                STEP_TIMEOUT=420); logs $R/suite_*.log
#   cuda-new     only what has not run on a GPU yet: tests/test_cuda.py -k block1d (1x128 x 1x128 kernel),
#                the XLA-path GPU checks and fp8_block's backend="ffi" oracle cases
#   qforms       the XLA-path GPU numerics checks, then benchmarks/xla_quantize_forms.py (HLO forms of the FP8
#                cast and amax, kernel-timed)
#   dg-ffi       tests/test_dot_general.py oracle suite with backend="ffi" on the GPU
#   gemm:SHAPES  benchmarks/gemm.py (every recipe, both backends), one process per shape, e.g. gemm:8192x8192x8192
#   gemm-steady  benchmarks/gemm_steady.py: ours against torch._scaled_mm on the same FP8 bytes, interleaved
#                long windows, SM clock and power per row (GS_ARGS, e.g. "--shapes 8192x8192x8192 --rounds 6")
#   ncu-gemm     Nsight Compute sections of our per-tensor CUTLASS GEMM and of cuBLASLt's (via torch) at 8192^3
#   quant        benchmarks/cuda_quantize.py (all kinds)
#   quant-ab     cuda_quantize.py per library (build-cuda/libmxprec_cuda.so, then build-cuda/ab/*.so;
#                QUANT_KERNELS, QUANT_SHAPES, QUANT_ARGS e.g. --no-peer), for same-call A/B of kernel variants
#   onchip-ab    per-tensor current scaling in one read (onchip_kernel): its GPU tests per library, then cuda_quantize.py with
#                MXPREC_QUANTIZE_ONCHIP=0 / 1 / 2 (ab libraries: 1 / 2; ONCHIP_KNOBS / ONCHIP_AB_KNOBS override),
#                ONCHIP_ROUNDS (default 1), QUANT_SHAPES, ONCHIP_TEST_LIBS (test only these library names)
#   tall-ab      row scaling down the columns in one launch (tall_col_kernel): its GPU tests, then cuda_quantize.py
#                (row_e4m3, tile1x128_e4m3 as the control) with MXPREC_QUANTIZE_TALL=0, then each mode of TALL_MODES
#                (default "1 2": without / with L2 hints) at each lag of TALL_LAGS (default "0": the host's rule; e.g.
#                "0 2 3 8"), TALL_ROUNDS rounds (default 1), QUANT_SHAPES, TALL_KERNELS (default
#                row_e4m3,tile1x128_e4m3), TALL_BASE (default 0:0, the two passes; empty: left out), TALL_AB=1 (also
#                each build-cuda/ab/*.so, interleaved per round), TALL_INPLACES (default "_": the size rule; e.g.
#                "_ 0 1": also each MXPREC_QUANTIZE_TALL_INPLACE), TALL_RING_SLOTS (mode 3, tall_ring_kernel: default
#                "_", its default slots; e.g. "_ 2")
#   onchip-trace onchip_kernel's phase timings (benchmarks/onchip_trace.py) from each build-cuda/trace/*.so, a
#                -DMXPREC_ONCHIP_TRACE build of the library (QUANT_SHAPES, default 16384x4096,4096x4096)
#   onchip-llama:ARMS each arm with MXPREC_QUANTIZE_ONCHIP=0 / 1 interleaved (LLAMA_PAIRS rounds, default 2)
#   gemm-ab:SHAPES  benchmarks/gemm.py --backend ffi per library (GEMM_RECIPES, default fp8_block)
#   llama:ARMS   one process per arm of the llama3_8b_4layer step, e.g. llama:bf16,fp8_current,flax_fp8;
#                merge the per-arm JSONs afterwards with `python -m mxprec.bench llama --merge ...`
#   llama-kernels:ARMS each arm per block-GEMM kernel (LLAMA_KERNELS, default "cutlass persistent"; "persistent:192"
#                also sets MXPREC_SM90_BLOCKWISE_TILE_N), interleaved,
#                LLAMA_PAIRS rounds (default 2)
#   rounds:ARMS  the arms interleaved, LLAMA_PAIRS rounds (default 2), one process each
#   llama-ab:ARMS each arm once per library (build-cuda/libmxprec_cuda.so, then build-cuda/ab/*.so), same call
#   kmajor:ARMS  Wgrad's K-major quantize kernel: its GPU tests, cuda_quantize.py against quantize + code transpose,
#                then each arm with MXPREC_TRANSPOSED_QUANTIZE=0 / 1 interleaved (LLAMA_PAIRS rounds, default 2)
#   dy-copies:ARMS dY's Dgrad + Wgrad copies in one call (mxprec.kernels.cuda.quantize_rows_and_transposed): the
#                transposed-quantize GPU tests, cuda_quantize.py against the two calls, then each arm with
#                MXPREC_ROWS_TRANSPOSED_QUANTIZE=0 / 1 interleaved (LLAMA_PAIRS rounds, default 2)
#   forms:FORMS  benchmarks/xla_fp8_forms.py: which HLO form of the XLA per-tensor FP8 GEMM becomes one
#                cuBLASLt call (and compile/step times of one dot_general step per form)
#   profile:ARMS like llama:ARMS with --profile (jax.profiler, 2 traced steps) and 5 timed steps
#   hlo:ARMS     profile:ARMS plus XLA's optimized HLO of the train step, its buffer live ranges and memory
#                report ($R/hlo_ARM.*.gz), to map the profile's fusion names to the ops they fuse
#   clocks:ARMS  each arm (30 timed steps) while nvidia-smi logs the SM clock, power and clock-event reasons every
#                50 ms ($R/smi_log.csv), summarized per arm by benchmarks/gpu_clocks.py ($R/clocks.json)
#   swiglu-forms benchmarks/swiglu_backward_forms.py: the SwiGLU backward with its FP8 casts and amaxes (fp8_delayed's
#                largest non-GEMM fusion) in forms that drop one part each, kernel-timed
#   fused-mlp    the fused MLP block (mxprec.fused_mlp): tests/test_fused_mlp.py on the GPU, then the library's one-kernel
#                SwiGLU backward (CUDA) against XLA's forms and the Pallas prototype (SWIGLU_CONFIGS, "" for none) at
#                the step's shape (swiglu_backward_pallas.py --library)
#   swiglu-kernels the fused MLP block's two CUDA kernels alone (benchmarks/swiglu_kernels.py: time, TB/s, codes against
#                XLA's evaluation) once per library (build-cuda/libmxprec_cuda.so, then build-cuda/ab/*.so), same call
#   delayed-passlog fp8_delayed with XLA's pass pipeline logging: the last pass logged is where a stuck
#                compile is
#   cuda-gemm-tests tests/test_cuda.py alone
#   blockwise    benchmarks/blockwise_gemm.py (mxprec's persistent block GEMM vs CUTLASS's and torch), then the block
#                GEMM tests on the persistent kernel
#   epilogue-scaled blockwise_gemm.py for the per-tensor and row-wise families (BW_SCALINGS, default tensor,row;
#                BW_SHAPES, BW_KERNELS), then their persistent-kernel GPU tests (-k epilogue_scaled)
#   blockwise-ab blockwise_gemm.py once per library (build-cuda/libmxprec_cuda.so, then build-cuda/ab/*.so; BW_SHAPES,
#                BW_KERNELS), then the block GEMM tests on each ab library's persistent kernel (BW_AB_TESTS=0 skips them)
#   ncu-blockwise:SHAPE ncu --set full of one 128x128-scaled block GEMM, ours (persistent) and CUTLASS's
#                (BW_NCU_KERNELS, default "persistent cutlass"; MXPREC_CUDA_LIBRARY picks the library)
#   transpose    the FP8 code transpose kernel: its GPU tests, then benchmarks/fp8_transpose.py
#   xla-gpu-numerics the XLA path's numerics on the GPU (quantizer scales, fused quantize + dequantize, oracle)
#   ncu-src:SHAPE ncu --set full with per-SASS-instruction stall samples, ours and cuBLASLt, one e4m3 GEMM of SHAPE
#   raster1:SHAPE the default per-tensor kernel at SHAPE per MXPREC_SM90_RASTER:SWIZZLE in RASTERS
#   ncu-narrow   Nsight Compute sections of the FP4 / FP6 / NVFP4 quantize kernels (hgroup / col / nvfp4_row) on 16384x4096
#   cuda-quant-tests tests/test_cuda_quantize.py only
#   cuda-sharding tests/test_cuda_sharding.py: dot_general's CUDA path and quantize_transposed sharded over every GPU
#                (needs 2+ GPUs: kind nvidia-h200-x2)
#   ncu-qsrc     ncu --set full + per-SASS-instruction counts of single quantize kernels (QSRC=spec:axis:kernel,...)
#   ncu-traffic  DRAM bytes read / written and L2 hit rate (ncu --metrics) of per-tensor current scaling (onchip_kernel,
#                MXPREC_QUANTIZE_ONCHIP 2 and 1, and the two-pass kernels) and row scaling down the columns
#                (tall_col_kernel, MXPREC_QUANTIZE_TALL 2 and 1), col_kernel (1 x 128 tiles down the columns: one
#                cp.async read of x, the control), then tall_col_kernel's warp stalls; one bf16 input (QUANT_SHAPE,
#                default 16384x4096)
#   ncu-quant    Nsight Compute sections (speed of light, memory, warp stalls, occupancy) of the CUDA quantize
#                kernels (delayed cast, tile 1x128 along axis -1, MXFP8 along both axes) on one 8192x8192 bf16 input
#   raster       per-tensor GEMM (default tiles): persistent-scheduler raster order m / n x swizzle 1 / 4 / 8
#   gemm-variants GEMM builds build-cuda/var/NAME/*.o (objects built with other flags): tests + benchmark each
#   tiles        per-tensor GEMM tile configs 3/4/5 x persistent-scheduler swizzle 1/4/8 (cuda_fp8_gemm.py)
#   delayed-diag fp8_delayed with XLA GPU autotuning off / Triton GEMMs off (its compile did not finish
#                within 210 s in the second session; which flag, if any, makes it compile?)
# Environment: OUT (required), STEP_TIMEOUT (s, default 170), PYTHON (default python3), FORM (llama:
# stage only: MXPREC_XLA_FP8_FORM for the arm), AQ (llama: and hlo: stages: MXPREC_AUTO_QUANTIZE for the
# arm, e.g. AQ=tile,mx,delayed or AQ=tile,mx,weights; names get _aq...), CONFIG (the Llama config of the
# llama / profile / hlo stages; default llama3_8b_4layer), LLAMA_ARGS (extra `mxprec.bench llama` arguments
# of those stages, e.g. LLAMA_ARGS="--loss-pick gather"), LLAMA_XLA_FLAGS (XLA_FLAGS of the llama: / llama-ab: arms)
# and TAG (a suffix for the llama: / llama-ab: / hlo: / profile: output names). REQUIRE_GPU (e.g. H200): exit 3
# before any stage unless the first GPU's name contains it, so that a call meant for one card costs little on another
# (the device tool's kinds give H100s or H200s).
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
T="${STEP_TIMEOUT:-170}"
CONFIG="${CONFIG:-llama3_8b_4layer}"
R="$OUT/r"
mkdir -p "$R"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > "$R/smi.txt" 2>&1 || true
if [ -n "${REQUIRE_GPU:-}" ] && ! head -n 1 "$R/smi.txt" | grep -q -- "$REQUIRE_GPU"; then
  echo "REQUIRE_GPU=$REQUIRE_GPU: this GPU is $(head -n 1 "$R/smi.txt"); no stage run" >&2
  exit 3
fi

step() {  # step NAME COMMAND...: runs under the time limit, logs to $R/NAME.log, prints the tail
  local name="$1"
  shift
  timeout "$T" "$@" > "$R/$name.log" 2>&1
  echo "== $name rc=$?"
  tail -n 6 "$R/$name.log"
  # After every step: a call cut by the device's limit returns only a few files, never the loose ones.
  tar czf "$OUT/results.tgz" -C "$OUT" r
}

llama_step() {  # llama_step NAME ARM [BENCH ARGS...]: one arm of $CONFIG, env from LLAMA_ENV=(K=V ...)
  local name="$1" arm="$2"
  shift 2
  [ "$CONFIG" != llama3_8b_4layer ] && name="${name}_$CONFIG"
  step "$name" env "${LLAMA_ENV[@]}" "$PY" -m mxprec.bench llama --config "$CONFIG" --arms "$arm" \
    --isolate off --no-progress --out "$R/$name" ${LLAMA_ARGS:-} "$@"
}
LLAMA_ENV=()

knob_rounds() {  # knob_rounds VAR TAG ARMS: each arm (comma-separated) with VAR=0, then VAR=1, LLAMA_PAIRS rounds
  # (default 2), one process each, named llama_ARM_TAG<0|1>_ROUND
  local var="$1" tag="$2" arms arm round knob
  IFS=, read -r -a arms <<< "$3"
  for ((round = 1; round <= ${LLAMA_PAIRS:-2}; round++)); do
    for knob in 0 1; do
      LLAMA_ENV=("$var=$knob")
      for arm in "${arms[@]}"; do llama_step "llama_${arm}_${tag}${knob}_$round${TAG:-}" "$arm"; done
    done
  done
  LLAMA_ENV=()
}
# AQ, once for the llama: and hlo: stages: the arm's environment entry and its name tag (_aq + AQ's names).
AQ_ENV=(${AQ+MXPREC_AUTO_QUANTIZE=$AQ})
AQ_TAG="${AQ+_aq${AQ//,/_}}"

ncu_full() {  # ncu_full NAME KERNEL_REGEX SKIP COMMAND...: ncu --set full of the (SKIP+1)-th launch of the matching
  # kernel in COMMAND ($R/NAME.ncu-rep), its details page ($R/NAME_details.log) and per-SASS-instruction CSV
  local name="$1" kernel="$2" skip="$3"
  shift 3
  step "$name" env XLA_PYTHON_CLIENT_PREALLOCATE=false ncu --kernel-name regex:"$kernel" --launch-skip "$skip" \
    --launch-count 1 --set full -f -o "$R/$name" "$@"
  step "${name}_details" ncu -i "$R/$name.ncu-rep" --page details
  step "${name}_sass" sh -c "ncu -i '$R/$name.ncu-rep' --page source --csv --print-source sass | gzip > '$R/${name}_sass.csv.gz'"
}

raster_sweep() {  # raster_sweep SHAPES SUFFIX RASTER:SWIZZLE...: the default per-tensor kernel per scheduler setting
  local shapes="$1" suffix="$2" rs
  shift 2
  for rs in "$@"; do
    step "raster_${rs/:/_sw}$suffix" env MXPREC_SM90_RASTER="${rs%%:*}" MXPREC_SM90_SWIZZLE="${rs##*:}" "$PY" \
      benchmarks/cuda_fp8_gemm.py --only mxprec --shapes "$shapes" --out "$R/raster_${rs/:/_sw}$suffix.json"
  done
}
# Libraries carried compressed: the device tool carries at most 64 MiB, and three ~21 MB libraries (the built one plus
# two build-cuda/ab/*.so) do not fit. Pack them here with
#   (cd build-cuda && tar cf - libmxprec_cuda.so ab/*.so | xz -6 -T2 > libs.tar.xz)
# and carry build-cuda/libs.tar.xz alone (~4 MB); it is unpacked over build-cuda/ before any stage.
if [ -f build-cuda/libs.tar.xz ]; then
  tar xJf build-cuda/libs.tar.xz -C build-cuda || { echo "could not unpack build-cuda/libs.tar.xz" >&2; exit 1; }
fi
# The libraries the *-ab stages compare in one call: the built one, then every build-cuda/ab/*.so.
shopt -s nullglob
AB_LIBS=("$PWD/build-cuda/libmxprec_cuda.so" "$PWD"/build-cuda/ab/*.so)
shopt -u nullglob

for stage in "$@"; do
  case "$stage" in
    cuda-tests)
      step test_cuda_quantize "$PY" -m pytest -q -rfE -p no:cacheprovider tests/test_cuda_quantize.py
      step test_cuda "$PY" -m pytest -q -rfE -p no:cacheprovider tests/test_cuda.py
      step test_gpu_numerics "$PY" -m pytest -q -rfE -p no:cacheprovider tests/test_quantize_api.py \
        tests/test_dot_general.py -k "tie or gpu_xla" ;;
    gpu-suite)  # the shards run concurrently (compiles are CPU-bound; 16 cores), then their summaries
      shards=()
      suite_shard() {  # suite_shard NAME PYTEST ARGS...: one pytest process in the background, $R/suite_NAME.log
        local name="$1"
        shift
        shards+=("$name")
        XLA_PYTHON_CLIENT_PREALLOCATE=false timeout "$T" "$PY" -m pytest -q -rfE -p no:cacheprovider "$@" \
          > "$R/suite_$name.log" 2>&1 &
      }
      # tests/test_cuda.py in four shards of its test ids, round robin (thirty-ninth session: six such shards ran the
      # whole file in ~290 s, where -k groups left one shard past the limit)
      mapfile -t cuda_ids < <("$PY" -m pytest --collect-only -q -p no:cacheprovider tests/test_cuda.py | grep '::')
      for i in 0 1 2 3; do
        part=()
        for j in "${!cuda_ids[@]}"; do
          if (( j % 4 == i )); then part+=("${cuda_ids[$j]}"); fi
        done
        suite_shard "cuda_$i" "${part[@]}"
      done
      suite_shard quantize tests/test_cuda_quantize.py
      suite_shard rest tests/test_cuda_quantize_transposed.py tests/test_dot_general.py tests/test_quantize_api.py \
        tests/test_llama.py
      suite_shard fused_mlp tests/test_fused_mlp.py
      wait
      for name in "${shards[@]}"; do echo "== suite_$name"; tail -n 4 "$R/suite_$name.log"; done
      tar czf "$OUT/results.tgz" -C "$OUT" r ;;
    cuda-quant-tests)  # tests/test_cuda_quantize.py only (the quantize kernels)
      step test_cuda_quantize "$PY" -m pytest -q -rfE -p no:cacheprovider tests/test_cuda_quantize.py ;;
    cuda-sharding)  # the CUDA path under jit + NamedSharding on every GPU of the machine (skips below 2 GPUs; run it on
      # kind nvidia-h200-x2 or larger)
      step test_cuda_sharding "$PY" -m pytest -q -rfE -p no:cacheprovider tests/test_cuda_sharding.py ;;
    transpose)  # the FP8 code transpose: its GPU tests, then benchmarks/fp8_transpose.py (ours, XLA's, copy)
      step test_transpose "$PY" -m pytest -q -rfE -p no:cacheprovider tests/test_cuda.py tests/test_dot_general.py \
        -k "transpose or auto_dot_general or auto_fp8_rowwise or gpu_xla"
      step transpose "$PY" benchmarks/fp8_transpose.py --out "$R/transpose" ;;
    xla-gpu-numerics)  # the XLA path's GPU numerics: quantizer scales vs the CPU, fused quantize-dequantize,
      # the dot_general oracle suite with backend="xla" (never run on a GPU before the seventeenth session)
      step test_xla_gpu "$PY" -m pytest -q -rfE -p no:cacheprovider tests/test_cuda.py tests/test_quantize_api.py \
        tests/test_dot_general.py -k "scales_equal or codes_equal or exact_div or rounds_on_the_gpu or gpu_xla or tie or amax or (oracle and xla)" ;;
    blockwise)  # the block-scaled GEMM kernels: benchmarks/blockwise_gemm.py (torch blockwise, CUTLASS's kernel and ours,
      # same process; BW_SHAPES, BW_KERNELS), then the block GEMM tests on ours (MXPREC_SM90_BLOCKWISE_KERNEL=persistent;
      # BW_CLUSTER: MXPREC_SM90_BLOCKWISE_CLUSTER of the tests)
      step blockwise_gemm "$PY" benchmarks/blockwise_gemm.py ${BW_SHAPES:+--shapes $BW_SHAPES} \
        ${BW_KERNELS:+--kernels $BW_KERNELS} ${BW_SCALINGS:+--scalings $BW_SCALINGS} --out "$R/blockwise_gemm.json"
      step test_blockwise_persistent env MXPREC_SM90_BLOCKWISE_KERNEL=persistent \
        ${BW_CLUSTER:+MXPREC_SM90_BLOCKWISE_CLUSTER=$BW_CLUSTER} "$PY" -m pytest -q -rfE \
        -p no:cacheprovider tests/test_cuda.py -k "block" ;;
    epilogue-scaled)  # per-tensor / row-wise: the persistent kernel's epilogue-scaled mode against CUTLASS and torch
      step epilogue_scaled_gemm "$PY" benchmarks/blockwise_gemm.py ${BW_SHAPES:+--shapes $BW_SHAPES} \
        ${BW_KERNELS:+--kernels $BW_KERNELS} --scalings "${BW_SCALINGS:-tensor,row}" --out "$R/epilogue_scaled_gemm.json"
      step test_epilogue_scaled "$PY" -m pytest -q -rfE -p no:cacheprovider tests/test_cuda.py -k "epilogue_scaled" ;;
    blockwise-ab)  # blockwise_gemm.py per library, same call; then each build-cuda/ab/*.so's persistent block tests
      for lib in "${AB_LIBS[@]}"; do
        name="$(basename "$lib" .so)"
        step "blockwise_$name" env MXPREC_CUDA_LIBRARY="$lib" "$PY" benchmarks/blockwise_gemm.py \
          ${BW_SHAPES:+--shapes $BW_SHAPES} ${BW_KERNELS:+--kernels $BW_KERNELS} \
          ${BW_SCALINGS:+--scalings $BW_SCALINGS} --out "$R/blockwise_$name.json"
      done
      if [ "${BW_AB_TESTS:-1}" = 1 ]; then
        for lib in "${AB_LIBS[@]:1}"; do
          name="$(basename "$lib" .so)"
          step "test_blockwise_$name" env MXPREC_CUDA_LIBRARY="$lib" MXPREC_SM90_BLOCKWISE_KERNEL=persistent \
            "$PY" -m pytest -q -rfE -p no:cacheprovider tests/test_cuda.py -k "block"
        done
      fi ;;
    cuda-gemm-tests)  # tests/test_cuda.py only (the GEMM kernels, FFI contract, auto routing)
      step test_cuda "$PY" -m pytest -q -rfE -p no:cacheprovider tests/test_cuda.py ;;
    cuda-new)
      step test_cuda_block1d "$PY" -m pytest -q -rfE -p no:cacheprovider tests/test_cuda.py -k block1d
      step test_gpu_numerics "$PY" -m pytest -q -rfE -p no:cacheprovider tests/test_quantize_api.py \
        tests/test_dot_general.py -k "tie or gpu_xla"
      step test_dg_ffi_block "$PY" -m pytest -q -rfEs -p no:cacheprovider tests/test_dot_general.py -k "ffi and fp8_block" ;;
    qforms)  # the XLA-path GPU numerics checks, then the HLO forms of the FP8 cast and amax
      step test_gpu_numerics "$PY" -m pytest -q -rfE -p no:cacheprovider tests/test_quantize_api.py \
        tests/test_dot_general.py -k "tie or gpu_xla"
      step xla_quantize_forms "$PY" benchmarks/xla_quantize_forms.py --out "$R/xla_quantize_forms.json" ;;
    dg-ffi)
      step test_dg_ffi "$PY" -m pytest -q -rfEs -p no:cacheprovider tests/test_dot_general.py -k "ffi" ;;
    gemm:*)  # gemm:SHAPE,SHAPE,... one process per shape (each its own time limit); GEMM_RECIPES picks recipes
      IFS=, read -r -a shapes <<< "${stage#gemm:}"
      for shape in "${shapes[@]}"; do
        step "gemm_$shape" env ${GEMM_XLA_FLAGS:+XLA_FLAGS=$GEMM_XLA_FLAGS} "$PY" benchmarks/gemm.py --recipes "${GEMM_RECIPES:-fp8_current,fp8_rowwise,fp8_block,mxfp8,mxfp6,mxfp4,nvfp4}" \
          --backend both --iters 20 --shapes "$shape" --out "$R/gemm_$shape"
      done ;;
    gemm-steady)
      step gemm_steady "$PY" benchmarks/gemm_steady.py --out "$R/gemm_steady" --torch-own-operands ${GS_ARGS:-} ;;
    ncu-gemm)  # Nsight Compute on one 8192^3 e4m3 x e4m3 GEMM: our CUTLASS per-tensor kernel, then cuBLASLt (torch)
      for who in "mxprec device_kernel" "torch_scaled_mm nvjet"; do
        read -r op kernel <<< "$who"
        step "ncu_gemm_$op" ncu --kernel-name regex:"$kernel" --launch-count 1 --section SpeedOfLight \
          --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
          --section SchedulerStats --section LaunchStats --section Occupancy --section InstructionStats \
          "$PY" benchmarks/cuda_fp8_gemm.py --only "$op" --shapes 8192x8192x8192
      done ;;
    ncu-src:*)  # ncu --set full (incl. source-level warp-stall sampling) on one e4m3 x e4m3 GEMM of SHAPE (MxKxN):
      # our per-tensor kernel, then cuBLASLt (torch); the report, its details page and its per-SASS-instruction CSV
      shape="${stage#ncu-src:}"
      for who in "mxprec device_kernel" "torch_scaled_mm nvjet"; do
        read -r op kernel <<< "$who"
        ncu_full "ncusrc_$op" "$kernel" 4 "$PY" benchmarks/cuda_fp8_gemm.py --only "$op" --shapes "$shape"
      done ;;
    ncu-blockwise:*)  # ncu --set full (with per-SASS-instruction stall samples) of one 128x128-scaled block GEMM of SHAPE
      # (MxKxN): mxprec's own kernel (MXPREC_SM90_BLOCKWISE_KERNEL=persistent, default cluster), then CUTLASS's;
      # the report, its details page and its per-instruction CSV (benchmarks/ncu_sass_regions.py reads it)
      shape="${stage#ncu-blockwise:}"
      for kern in ${BW_NCU_KERNELS:-persistent cutlass}; do  # MXPREC_SM90_BLOCKWISE_KERNEL values
        kname=device_kernel
        [ "$kern" = persistent ] && kname=blockwise_gemm_kernel
        ncu_full "ncublk_$kern" "$kname" 3 "$PY" benchmarks/blockwise_gemm.py --shapes "$shape" --kernels "$kern" --iters 3
      done ;;
    raster1:*)  # the default per-tensor kernel at one SHAPE x (raster, swizzle) in RASTERS (default m:1 m:8 n:1 n:8)
      shape="${stage#raster1:}"
      # shellcheck disable=SC2086
      raster_sweep "$shape" "_$shape" ${RASTERS:-m:1 m:8 n:1 n:8} ;;
    gemm-variants)  # GEMM builds to compare in one call: every build-cuda/var/NAME/ holds objects (*.o) built with
      # other flags that replace their namesakes of build-cuda/obj when NAME's library is linked here. Per NAME:
      # the GEMM tests of the families it rebuilt (tensorwise / rowwise / blockwise, one pytest run), then
      # cuda_fp8_gemm.py (per-tensor) and gemm.py (row-wise, block; ffi); once: the built library (and torch,
      # XLA FP8 for per-tensor; GV_BASE_PEERS overrides that list; GV_BASE_GEMM=0 skips its row-wise / block run). GV_TESTS: a
      # glob of the NAMEs whose tests run (default all).
      shopt -s nullglob
      GV_SHAPES="${GV_SHAPES:-8192x8192x8192,16384x4096x14336}"
      for dir in build-cuda/var/*/; do
        name="$(basename "$dir")" lib="/tmp/mxprec_var_$(basename "$dir")"
        mkdir -p "$lib"
        objs=()
        for x in build-cuda/obj/*.o; do
          if [ -f "$dir/$(basename "$x")" ]; then objs+=("$dir/$(basename "$x")"); else objs+=("$x"); fi
        done
        nvcc -shared -gencode=arch=compute_90a,code=sm_90a "${objs[@]}" -o "$lib/libmxprec_cuda.so" || continue
        export MXPREC_CUDA_LIBRARY="$lib/libmxprec_cuda.so"
        # The families NAME rebuilt: their tests (one pytest run) and their benchmark.
        tests=() recipes=()
        if [ -f "$dir/sm90_fp8_gemm_tensorwise_bf16.o" ]; then
          tests+=("tn_matches or transposed_operands_bias_delayed or test_shapes or fresh_inputs")
        fi
        if [ -f "$dir/sm90_fp8_gemm_rowwise_bf16.o" ]; then tests+=("row and not block") recipes+=(fp8_rowwise); fi
        if [ -f "$dir/sm90_fp8_gemm_blockwise_bf16.o" ] || [ -f "$dir/sm90_fp8_gemm_blockwise1d_bf16.o" ]; then
          tests+=("block") recipes+=(fp8_block)
        fi
        if [ "${#tests[@]}" -gt 0 ] && [[ "$name" == ${GV_TESTS:-*} ]]; then
          k="$(printf ' or (%s)' "${tests[@]}")"
          step "gv_test_$name" "$PY" -m pytest -q -rfE -p no:cacheprovider tests/test_cuda.py -k "${k# or }"
        fi
        if [ -f "$dir/sm90_fp8_gemm_tensorwise_bf16.o" ]; then
          step "gv_$name" "$PY" benchmarks/cuda_fp8_gemm.py --only mxprec --shapes "$GV_SHAPES" --out "$R/gv_$name.json"
        fi
        if [ "${#recipes[@]}" -gt 0 ]; then
          step "gv_${name}_gemm" "$PY" benchmarks/gemm.py --recipes "$(IFS=,; echo "${recipes[*]}")" --backend ffi \
            --iters 20 --shapes "$GV_SHAPES" --bf16-only --out "$R/gv_${name}_gemm"
        fi
        unset MXPREC_CUDA_LIBRARY
      done
      shopt -u nullglob
      step gv_base "$PY" benchmarks/cuda_fp8_gemm.py --only "${GV_BASE_PEERS:-mxprec,torch_scaled_mm,xla_fp8}" --shapes "$GV_SHAPES" \
        --out "$R/gv_base.json"
      if [ "${GV_BASE_GEMM:-1}" != 0 ]; then
        step gv_base_gemm "$PY" benchmarks/gemm.py --recipes fp8_rowwise,fp8_block --backend ffi --iters 20 \
          --shapes "$GV_SHAPES" --bf16-only --out "$R/gv_base_gemm"
      fi ;;
    quant)
      step quant "$PY" benchmarks/cuda_quantize.py --out "$R/quant" ;;
    quant-ab)  # cuda_quantize.py once per library: the built one, then build-cuda/ab/*.so (same call)
      for lib in "${AB_LIBS[@]}"; do
        name="$(basename "$lib" .so)"
        step "quant_$name" env MXPREC_CUDA_LIBRARY="$lib" "$PY" benchmarks/cuda_quantize.py \
          ${QUANT_KERNELS:+--kernels "$QUANT_KERNELS"} --shapes "${QUANT_SHAPES:-16384x4096}" ${QUANT_ARGS:-} --out "$R/quant_$name"
      done ;;
    tall-ab)  # row scaling down the columns in one launch: tall_col_kernel's GPU tests, then cuda_quantize.py with
      # MXPREC_QUANTIZE_TALL=0 (keys pass + col_kernel), then TALL_MODES x TALL_LAGS (lag 0: the host's rule)
      TALL_LIBS=("$PWD/build-cuda/libmxprec_cuda.so")
      [ "${TALL_AB:-0}" = 1 ] && TALL_LIBS=("${AB_LIBS[@]}")
      step tall_tests "$PY" -m pytest -q -x tests/test_cuda_quantize.py -k "tall or axis or large_bf16 or shapes_and"
      settings="${TALL_BASE-0:0}"  # mode:lag; mode 0 (the two passes) has no lag (TALL_BASE= : leave it out)
      for mode in ${TALL_MODES:-1 2}; do for lag in ${TALL_LAGS:-0}; do settings+=" $mode:$lag"; done; done
      for ((round = 1; round <= ${TALL_ROUNDS:-1}; round++)); do
        for lib in "${TALL_LIBS[@]}"; do  # the built library, then build-cuda/ab/*.so (TALL_AB=1)
          lname="$(basename "$lib" .so)"
          for setting in $settings; do
            mode="${setting%%:*}" lag="${setting#*:}"
            ips="${TALL_INPLACES:-_}"  # "_": tall_in_place_by_size
            [ "$mode" = 0 ] && ips=_   # the two passes have no tall_col_kernel instance to pick: once
            [ "$mode" = 3 ] && ips="${TALL_RING_SLOTS:-_}"  # tall_ring_kernel: its slots instead ("_": the default)
            for ip in $ips; do
              name="quant_tall${mode}_lag${lag}_ip${ip}_${lname}_$round"
              slots=_
              if [ "$mode" = 3 ]; then slots="$ip" ip=_ name="quant_tall${mode}_lag${lag}_slots${slots}_${lname}_$round"; fi
              step "$name" env MXPREC_CUDA_LIBRARY="$lib" MXPREC_QUANTIZE_TALL="$mode" \
                MXPREC_QUANTIZE_TALL_LAG="$lag" MXPREC_QUANTIZE_TALL_INPLACE="${ip#_}" \
                MXPREC_QUANTIZE_TALL_SLOTS="${slots#_}" \
                "$PY" benchmarks/cuda_quantize.py --kernels "${TALL_KERNELS:-row_e4m3,tile1x128_e4m3}" --no-peer \
                --shapes "${QUANT_SHAPES:-16384x4096,8192x8192,4096x4096}" --out "$R/$name"
            done
          done
        done
      done ;;
    onchip-ab)  # per-tensor current scaling in one read of x: onchip_kernel's GPU tests, then cuda_quantize.py
      # (tensor_e4m3, delayed_e4m3 as the control): the built library with MXPREC_QUANTIZE_ONCHIP=0 / 1 / 2, each
      # build-cuda/ab/*.so with 1 / 2, ONCHIP_ROUNDS rounds (default 1), QUANT_SHAPES (default
      # 16384x4096,8192x4096,4096x4096)
      for lib in "${AB_LIBS[@]}"; do  # ONCHIP_TEST_LIBS: only these library names (e.g. "libmxprec_cuda mix")
        [ -n "${ONCHIP_TEST_LIBS:-}" ] && [[ " $ONCHIP_TEST_LIBS " != *" $(basename "$lib" .so) "* ]] && continue
        step "onchip_tests_$(basename "$lib" .so)" env MXPREC_CUDA_LIBRARY="$lib" "$PY" -m pytest -q -x \
          tests/test_cuda_quantize.py -k "one_read or kernel_switch or every_bf16"
      done
      for ((round = 1; round <= ${ONCHIP_ROUNDS:-1}; round++)); do
        for lib in "${AB_LIBS[@]}"; do
          name="$(basename "$lib" .so)"
          knobs="${ONCHIP_AB_KNOBS:-1 2}"
          [ "$lib" = "${AB_LIBS[0]}" ] && knobs="${ONCHIP_KNOBS:-0 1 2}"
          for knob in $knobs; do
            step "quant_onchip${knob}_${name}_$round" env MXPREC_CUDA_LIBRARY="$lib" MXPREC_QUANTIZE_ONCHIP="$knob" \
              "$PY" benchmarks/cuda_quantize.py --kernels tensor_e4m3,delayed_e4m3 --no-peer \
              --shapes "${QUANT_SHAPES:-16384x4096,8192x4096,4096x4096}" --out "$R/quant_onchip${knob}_${name}_$round"
          done
        done
      done ;;
    gemm-ab:*)  # gemm-ab:SHAPE,...: gemm.py with backend ffi once per library (GEMM_RECIPES, default fp8_block)
      for lib in "${AB_LIBS[@]}"; do
        name="$(basename "$lib" .so)"
        step "gemm_$name" env MXPREC_CUDA_LIBRARY="$lib" "$PY" benchmarks/gemm.py --recipes "${GEMM_RECIPES:-fp8_block}" \
          --backend ffi --iters 20 --shapes "${stage#gemm-ab:}" --out "$R/gemm_$name"
      done ;;
    llama:*)
      IFS=, read -r -a arms <<< "${stage#llama:}"
      LLAMA_ENV=(${FORM:+MXPREC_XLA_FP8_FORM=$FORM} ${LLAMA_XLA_FLAGS:+"XLA_FLAGS=$LLAMA_XLA_FLAGS"} "${AQ_ENV[@]}")
      for arm in "${arms[@]}"; do llama_step "llama_$arm${FORM:+_$FORM}$AQ_TAG${TAG:-}" "$arm"; done
      LLAMA_ENV=() ;;
    rounds:*)  # rounds:ARMS: the arms interleaved, LLAMA_PAIRS (default 2) rounds, one process each (llama_ARM_rROUND)
      IFS=, read -r -a arms <<< "${stage#rounds:}"
      for ((round = 1; round <= ${LLAMA_PAIRS:-2}; round++)); do
        for arm in "${arms[@]}"; do llama_step "llama_${arm}_r$round${TAG:-}" "$arm"; done
      done ;;
    llama-ab:*)  # llama-ab:ARMS: each arm once per library (build-cuda/libmxprec_cuda.so, then build-cuda/ab/*.so)
      IFS=, read -r -a arms <<< "${stage#llama-ab:}"
      for lib in "${AB_LIBS[@]}"; do
        name="$(basename "$lib" .so)"
        LLAMA_ENV=(MXPREC_CUDA_LIBRARY="$lib" ${LLAMA_XLA_FLAGS:+"XLA_FLAGS=$LLAMA_XLA_FLAGS"} "${AQ_ENV[@]}")
        for arm in "${arms[@]}"; do llama_step "llama_${arm}_$name${TAG:-}" "$arm"; done
      done
      LLAMA_ENV=() ;;
    llama-kernels:*)  # llama-kernels:ARMS: each arm per MXPREC_SM90_BLOCKWISE_KERNEL value in LLAMA_KERNELS (default
      # "cutlass persistent"), interleaved, LLAMA_PAIRS (default 2) rounds; MXPREC_CUDA_LIBRARY picks the library
      IFS=, read -r -a arms <<< "${stage#llama-kernels:}"
      for ((round = 1; round <= ${LLAMA_PAIRS:-2}; round++)); do
        for kern in ${LLAMA_KERNELS:-cutlass persistent}; do  # KERNEL[:TILE_N]
          IFS=: read -r kname ktile <<< "$kern"
          LLAMA_ENV=(MXPREC_SM90_BLOCKWISE_KERNEL="$kname" "${AQ_ENV[@]}")
          [ -n "$ktile" ] && LLAMA_ENV+=(MXPREC_SM90_BLOCKWISE_TILE_N="$ktile")
          kern="${kern//:/_}"
          for arm in "${arms[@]}"; do llama_step "llama_${arm}_${kern}_$round${TAG:-}" "$arm"; done
        done
      done
      LLAMA_ENV=() ;;
    kmajor:*)  # kmajor:ARMS: Wgrad's K-major quantize (mxprec.kernels.cuda.quantize_transposed): its GPU tests, the
      # quantize benchmark against quantize + code transpose, then each arm with MXPREC_TRANSPOSED_QUANTIZE=0 / 1,
      # interleaved, LLAMA_PAIRS (default 2) rounds
      step kmajor_tests "$PY" -m pytest -q tests/test_cuda_quantize_transposed.py
      step kmajor_quant "$PY" benchmarks/cuda_quantize.py --kernels tile1x128_e4m3_kmajor,tile1x128_e4m3 --no-peer \
        --shapes "${QUANT_SHAPES:-16384x4096,8192x8192,16384x14336}" --out "$R/kmajor_quant"
      knob_rounds MXPREC_TRANSPOSED_QUANTIZE kmajor "${stage#kmajor:}" ;;
    onchip-trace)  # onchip_kernel's phase timings from each trace build
      for lib in "$PWD"/build-cuda/trace/*.so; do
        name="$(basename "$lib" .so)"
        step "onchip_$name" env MXPREC_CUDA_LIBRARY="$lib" "$PY" benchmarks/onchip_trace.py \
          --shapes "${QUANT_SHAPES:-16384x4096,4096x4096}" --out "$R/onchip_$name"
      done ;;
    onchip-llama:*)  # onchip-llama:ARMS: each arm with MXPREC_QUANTIZE_ONCHIP=0 / 1 interleaved, LLAMA_PAIRS rounds
      knob_rounds MXPREC_QUANTIZE_ONCHIP onchip "${stage#onchip-llama:}" ;;
    dy-copies:*)  # dy-copies:ARMS: see the header
      step dycopies_tests "$PY" -m pytest -q tests/test_cuda_quantize_transposed.py
      step dycopies_quant "$PY" benchmarks/cuda_quantize.py --kernels tile1x128_e4m3_rows_kmajor --no-peer \
        --shapes "${QUANT_SHAPES:-16384x4096,8192x8192,16384x14336}" --out "$R/dycopies_quant"
      knob_rounds MXPREC_ROWS_TRANSPOSED_QUANTIZE dycopies "${stage#dy-copies:}" ;;
    forms:*)  # forms:FORM,FORM,... one process per form
      IFS=, read -r -a forms <<< "${stage#forms:}"
      for form in "${forms[@]}"; do
        step "forms_$form" "$PY" benchmarks/xla_fp8_forms.py --forms "$form" --no-bf16 --out "$R/forms" --reps 5
      done ;;
    profile:*)
      IFS=, read -r -a arms <<< "${stage#profile:}"
      for arm in "${arms[@]}"; do
        llama_step "prof_$arm${TAG:-}" "$arm" --warmup 2 --steps 5 --profile "/tmp/mxprec_trace_$arm${TAG:-}"
      done ;;
    hlo:*)
      IFS=, read -r -a arms <<< "${stage#hlo:}"
      for arm in "${arms[@]}"; do
        tag="$arm$AQ_TAG${TAG:-}"
        rm -rf "/tmp/mxprec_hlo_$tag"
        LLAMA_ENV=("XLA_FLAGS=--xla_dump_to=/tmp/mxprec_hlo_$tag --xla_dump_hlo_as_text" "${AQ_ENV[@]}")
        llama_step "hlo_$tag" "$arm" --warmup 2 --steps 5 --profile "/tmp/mxprec_trace_$tag"
        # the train step's module (jit_step): optimized HLO, buffer live ranges, memory-usage report
        for f in /tmp/mxprec_hlo_"$tag"/*jit_step*after_optimizations{.txt,-live-range.txt,-memory-usage-report.txt}; do
          [ -f "$f" ] && gzip -c "$f" > "$R/hlo_${tag}${f##*after_optimizations}.gz"
        done
        # the non-GEMM kernels by role (FP8 transposes / casts, optimizer, norms, ...): mxprec.bench.hlo_attribution
        j="$(ls "$R"/hlo_"$tag"*/llama_"$CONFIG".json 2>/dev/null | head -1)"
        [ -n "$j" ] && [ -f "$R/hlo_${tag}.txt.gz" ] && "$PY" -m mxprec.bench.hlo_attribution \
          "$j" "$R/hlo_${tag}.txt.gz" > "$R/hlo_${tag}_roles.md" 2>&1
      done
      LLAMA_ENV=() ;;
    clocks:*)
      IFS=, read -r -a arms <<< "${stage#clocks:}"
      nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
        --format=csv -lms 50 > "$R/smi_log.csv" 2>&1 &
      smi=$!
      runs=()
      for arm in "${arms[@]}"; do
        llama_step "clocks_$arm" "$arm" --warmup 3 --steps 30
        runs+=("$R/clocks_$arm$([ "$CONFIG" != llama3_8b_4layer ] && echo "_$CONFIG")")  # llama_step's name
      done
      kill "$smi"
      step clocks_summary "$PY" benchmarks/gpu_clocks.py --log "$R/smi_log.csv" --runs "${runs[@]}" --out "$R/clocks.json" ;;
    swiglu-forms)
      step swiglu_forms "$PY" benchmarks/swiglu_backward_forms.py --out "$R/swiglu_forms.json" ;;
    delayed-passlog)
      LLAMA_ENV=(TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=hlo_pass_pipeline=1)
      llama_step delayed_passlog fp8_delayed --warmup 1 --steps 3
      LLAMA_ENV=()
      grep -c "" "$R/delayed_passlog.log"; grep -i "pass" "$R/delayed_passlog.log" | tail -n 5 ;;
    ncu-traffic)
      shape="${QUANT_SHAPE:-16384x4096}"
      metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
      metrics+=,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum
      for v in 2 1 0; do
        step "ncu_traffic_onchip$v" env XLA_PYTHON_CLIENT_PREALLOCATE=false MXPREC_QUANTIZE_ONCHIP=$v ncu \
          --kernel-name regex:"onchip_kernel|amax_kernel|tensor_kernel" --metrics "$metrics" \
          "$PY" benchmarks/ncu_quantize_traffic.py --kinds tensor_e4m3:-1 --shape "$shape"
      done
      for v in 2 1; do
        step "ncu_traffic_tall$v" env XLA_PYTHON_CLIENT_PREALLOCATE=false MXPREC_QUANTIZE_TALL=$v ncu \
          --kernel-name regex:"tall_col_kernel" --metrics "$metrics" \
          "$PY" benchmarks/ncu_quantize_traffic.py --kinds row_e4m3:0 --shape "$shape"
      done
      # the control: col_kernel (one read of x by cp.async, as tall_col_kernel's second) for 1 x 128 tiles down the columns
      step ncu_traffic_col env XLA_PYTHON_CLIENT_PREALLOCATE=false ncu --kernel-name regex:"col_kernel" \
        --metrics "$metrics" "$PY" benchmarks/ncu_quantize_traffic.py --kinds tile1x128_e4m3:0 --shape "$shape"
      step ncu_traffic_tall_stalls env XLA_PYTHON_CLIENT_PREALLOCATE=false ncu --kernel-name regex:"tall_col_kernel" \
        --section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats \
        "$PY" benchmarks/ncu_quantize_traffic.py --kinds row_e4m3:0 --shape "$shape" ;;
    ncu-quant)
      cat > /tmp/mxprec_q1.py <<'PYEOF'
import jax, jax.numpy as jnp
from mxprec import formats as F
from mxprec.kernels import ffi
from mxprec.scaling import DelayedScaling, DelayedScalingState, MXScaling, TileScaling
x = jax.random.normal(jax.random.PRNGKey(0), (8192, 8192), jnp.bfloat16)
d = DelayedScaling(F.E4M3, history_len=16)
st = DelayedScalingState(DelayedScalingState.init(d).amax_history, jnp.float32(0.0123))
tile, mx = TileScaling(F.E4M3, (1, 128)), MXScaling(F.E4M3)
for spec, axis, state in ((d, -1, st), (tile, -1, None), (mx, -1, None), (mx, 0, None)):
    jax.block_until_ready(jax.jit(lambda v: ffi.quantize(v, spec, axis, state=state))(x))
PYEOF
      # XLA preallocates most of the GPU; ncu would save and restore all of it for every replay pass
      step ncu_quant env XLA_PYTHON_CLIENT_PREALLOCATE=false ncu --kernel-name regex:"tensor_kernel|hgroup_kernel|col_kernel" --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
        --section SchedulerStats --section InstructionStats --launch-count 4 "$PY" /tmp/mxprec_q1.py ;;
    ncu-narrow)  # Nsight Compute sections of the FP4 / FP6 / NVFP4 quantize kernels on one 16384x4096 bf16 input:
      # MXFP4 along axis 0 (col_kernel) and axis -1 (hgroup_kernel), MXFP6 E2M3 along -1, NVFP4 along both axes
      cat > /tmp/mxprec_q2.py <<'PYEOF'
import jax, jax.numpy as jnp
from mxprec import formats as F
from mxprec.kernels import ffi
from mxprec.scaling import MXScaling, NVFP4Scaling
x = jax.random.normal(jax.random.PRNGKey(0), (16384, 4096), jnp.bfloat16)
for spec, axis in ((MXScaling(F.E2M1), 0), (MXScaling(F.E2M1), -1), (MXScaling(F.E2M3), -1), (NVFP4Scaling(), -1),
                   (NVFP4Scaling(), 0)):
    jax.block_until_ready(jax.jit(lambda v: ffi.quantize(v, spec, axis))(x))
PYEOF
      step ncu_narrow env XLA_PYTHON_CLIENT_PREALLOCATE=false ncu --kernel-name regex:"vgroup_kernel|hgroup_kernel|col_kernel|nvfp4_row_kernel" \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
        --section LaunchStats --section SchedulerStats --section InstructionStats --section ComputeWorkloadAnalysis \
        --section SourceCounters --launch-count 5 "$PY" /tmp/mxprec_q2.py ;;
    ncu-qsrc)  # ncu --set full with per-SASS-instruction counts of single quantize kernels on a 16384x4096 bf16
      # input (QSRC: spec:axis:kernel, comma-separated; default the NVFP4 / MXFP4 kernels); source pages as CSV
      cat > /tmp/mxprec_q3.py <<'PYEOF'
import sys, jax, jax.numpy as jnp
from mxprec import formats as F
from mxprec.kernels import ffi
from mxprec.scaling import MXScaling, NVFP4Scaling, RowScaling, TileScaling
specs = {"nvfp4": NVFP4Scaling(), "mxfp4": MXScaling(F.E2M1), "mxfp6": MXScaling(F.E2M3),
         "mxfp8": MXScaling(F.E4M3), "tile1x128": TileScaling(F.E4M3, (1, 128)), "row": RowScaling(F.E4M3)}
x = jax.random.normal(jax.random.PRNGKey(0), (16384, 4096), jnp.bfloat16)
name, axis = sys.argv[1], int(sys.argv[2])
jax.block_until_ready(jax.jit(lambda v: ffi.quantize(v, specs[name], axis))(x))
PYEOF
      IFS=, read -r -a qs <<< "${QSRC:-nvfp4:-1:nvfp4_row_kernel,nvfp4:0:col_kernel,mxfp4:0:col_kernel,mxfp4:-1:hgroup_kernel}"
      for q in "${qs[@]}"; do
        IFS=: read -r qn qa qk <<< "$q"
        tag="qsrc_${qn}_ax${qa#-}_$qk"
        step "$tag" env XLA_PYTHON_CLIENT_PREALLOCATE=false ncu --kernel-name regex:"$qk" --launch-count 1 --set full \
          -f -o "$R/$tag" "$PY" /tmp/mxprec_q3.py "$qn" "$qa"
        step "${tag}_details" ncu -i "$R/$tag.ncu-rep" --page details
        step "${tag}_sass" sh -c "ncu -i '$R/$tag.ncu-rep' --page source --csv --print-source sass | gzip > '$R/${tag}_sass.csv.gz'"
        rm -f "$R/$tag.ncu-rep"
      done ;;
    raster)  # the default per-tensor kernel (carried build-cuda) x persistent-scheduler raster order m / n x swizzle 1 / 4 / 8
      step raster_torch "$PY" benchmarks/cuda_fp8_gemm.py --only torch_scaled_mm --shapes 8192x8192x8192,16384x4096x14336 \
        --out "$R/raster_torch.json"
      raster_sweep 8192x8192x8192,16384x4096x14336 "" m:1 m:4 m:8 n:1 n:4 n:8 ;;
    tiles)  # per-tensor tile configs 3 (carried build-cuda), 4, 5 (built here: carry .deps/cutlass_library) x swizzle 1 / 4 / 8
      for cfg in 4 5; do
        rm -rf "/tmp/mxprec_cfg$cfg" && cp -r build-cuda "/tmp/mxprec_cfg$cfg"  # relink: only the per-tensor TUs change
        step "build_cfg$cfg" env EXTRA_NVCC_FLAGS=-DMXPREC_SM90_TENSORWISE_CONFIG=$cfg ONLY='sm90_fp8_gemm_tensorwise*' \
          bash csrc/cuda_kernels/build.sh "/tmp/mxprec_cfg$cfg"
      done
      for lib in build-cuda /tmp/mxprec_cfg4 /tmp/mxprec_cfg5; do
        for sw in 1 4 8; do
          tag="$(basename "$lib")_sw$sw"
          step "tiles_$tag" env MXPREC_CUDA_LIBRARY="$lib/libmxprec_cuda.so" MXPREC_SM90_SWIZZLE=$sw "$PY" \
            benchmarks/cuda_fp8_gemm.py --only mxprec,torch_scaled_mm --shapes 8192x8192x8192,16384x4096x14336 \
            --out "$R/tiles_$tag.json"
        done
      done ;;
    fused-mlp)
      step fused_mlp_tests "$PY" -m pytest -q -rfE -p no:cacheprovider tests/test_fused_mlp.py
      step swiglu_library "$PY" benchmarks/swiglu_backward_pallas.py --configs "${SWIGLU_CONFIGS-32x128x4t}" --library \
        --out "$R/swiglu_library.json" ;;
    swiglu-kernels)
      for lib in "${AB_LIBS[@]}"; do
        name="$(basename "$lib" .so)"
        step "swiglu_kernels_$name" env MXPREC_CUDA_LIBRARY="$lib" "$PY" benchmarks/swiglu_kernels.py --label "$name" \
          --out "$R/swiglu_kernels.json"
      done ;;
    delayed-diag)
      LLAMA_ENV=(XLA_FLAGS=--xla_gpu_autotune_level=0)
      llama_step delayed_autotune0 fp8_delayed
      LLAMA_ENV=(XLA_FLAGS=--xla_gpu_enable_triton_gemm=false)
      llama_step delayed_notriton fp8_delayed
      LLAMA_ENV=() ;;
    *)
      echo "unknown stage $stage" >&2 ;;
  esac
done
tar czf "$OUT/results.tgz" -C "$OUT" r
