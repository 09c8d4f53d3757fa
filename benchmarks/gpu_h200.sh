#!/usr/bin/env bash
# The GPU benchmark and the extraction checks on the lent H200 with vLLM 0.20.0 (../shared/docs/GPU.md): run in
# the project root there, after the two large pieces were moved to /tmp/p0 and /tmp/p1, with .gpu/rest (the
# third piece and the extra wheels) and .gpu/patched (compat.fix --vllm '>=0.11.0' --apply .gpu/patched) carried.
#   bash benchmarks/gpu_h200.sh STEP...
#   STEP: llama[:PATHS] | deepseek[:PATHS] | check | tp2     (PATHS: benchmarks/gpu_extract.py --paths)
# Figures go to $OUT (the device tool's folder) or reports/gpu; a shape's earlier figures there are kept for the
# paths a step does not run again.
set -uo pipefail
OUT=${OUT:-reports/gpu}
mkdir -p "$OUT"
[ "$OUT" != reports/gpu ] && cp reports/gpu/gpu-*.json "$OUT"/ 2>/dev/null
if [ ! -d /tmp/vsite/vllm ]; then
  cat /tmp/p0 /tmp/p1 .gpu/rest/p2 > /tmp/vllm.tar.xz && mkdir -p /tmp/vsite && tar xJf /tmp/vllm.tar.xz -C /tmp/vsite \
    && rm /tmp/vllm.tar.xz || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .gpu/rest/whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/vsite:/tmp/site NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
bench() { python3 benchmarks/gpu_extract.py --patched .gpu/patched --out "$OUT" --work /tmp/compat-gpu "$@"; }
all=plain,hf,native,patched,gate,baseline,transfer
for step in "$@"; do
  echo "== $step $(date +%T)"
  paths=${step#*:}; [ "$paths" = "$step" ] && paths=$all
  case ${step%%:*} in
    llama) bench --shape llama-8b --paths "$paths" ;;
    deepseek) bench --shape deepseek-v3-6l --layer-ids 1,2,4,5 --paths "$paths" ;;
    check) python3 -m compat.extract --patched .gpu/patched --check --dtype bfloat16 --out /tmp/xcheck \
             > "$OUT/extract-check.txt" 2>&1; cp /tmp/xcheck/report.json "$OUT/extract-check.json" ;;
    tp2) bench --shape llama-8b --tp 2 --paths patched,gate --pickled 0 ;;  # on nvidia-h200-x2
  esac
done
