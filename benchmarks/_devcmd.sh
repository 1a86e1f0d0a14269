export PYTHONPATH=$PWD/src
for v in 1 2; do echo "== diag$v"; MXPREC_CUDA_LIBRARY=$PWD/build-cuda/ab/diag$v.so timeout 80 python3 benchmarks/blockwise_gemm.py --shapes 8192x8192x8192 --kernels persistent:1x1 2>&1 | grep tflops; done
for who in "persistent:1x1 blockwise_gemm_kernel" "cutlass device_kernel"; do read -r kern kname <<< "$who"; n=${kern%%:*}
 timeout 150 ncu --kernel-name regex:$kname --launch-skip 3 --launch-count 1 --set full --import-source no -f -o $OUT/ncu_$n python3 benchmarks/blockwise_gemm.py --shapes 8192x8192x8192 --kernels $kern --iters 3 > $OUT/ncu_$n.log 2>&1; echo "ncu $n rc=$?"
 ncu -i $OUT/ncu_$n.ncu-rep --page details > $OUT/ncu_${n}_details.txt 2>&1
 ncu -i $OUT/ncu_$n.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $OUT/ncu_${n}_sass.csv.gz
done
ls -la $OUT
