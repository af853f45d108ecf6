#!/usr/bin/env bash
# Issue 12's acceptance, done as the README says a person does it: for one definition,
# `new` a Python, a Triton and a CUDA solution (LANGUAGES picks some), fill in the kernel
# (the edit a person makes), judge each folder against the baseline, and write one HTML
# report of them all.
# Run on a CUDA machine (setup: scripts/gpu_setup.sh); OUT receives the folders, the rows, the logs and the report.
set -uo pipefail
OUT=${OUT:-results/walkthrough}
DEF=dense_gemm_bf16_nt_bias_n384_k384
WALK=$(mktemp -d /tmp/walk.XXXX)
inference-kernels() { python3 -m inference_kernels.cli "$@"; }
mkdir -p "$OUT"
[[ ${DEVICE:-cuda} == cuda ]] && source scripts/gpu_setup.sh

for language in python triton cuda; do
  inference-kernels new -d $DEF --language $language -o "$WALK/my_$language" || exit 1
done

# The edits. Python: the README's one line.
cat > "$WALK/my_python/main.py" <<'EOF'
import torch.nn.functional as F


def run(A, W, bias):
    return F.linear(A, W, bias)
EOF

# Triton: one program per BLOCK_M x BLOCK_N tile of C, FP32 accumulation over K, bias added
# before the one rounding to BF16 (the definition's contract).
cat > "$WALK/my_triton/main.py" <<'EOF'
import torch
import triton
import triton.language as tl


@triton.jit
def _linear(a_ptr, w_ptr, bias_ptr, c_ptr, M, N, K,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None] * K + ks[None, :],
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        w = tl.load(w_ptr + cols[:, None] * K + ks[None, :],
                    mask=(cols[:, None] < N) & (ks[None, :] < K), other=0.0)
        acc += tl.dot(a, tl.trans(w))
    acc += tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc.to(tl.bfloat16),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


@torch.no_grad()
def run(A, W, bias):
    M, K = A.shape
    N = W.shape[0]
    C = torch.empty((M, N), dtype=torch.bfloat16, device=A.device)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 64))
    _linear[grid](A, W, bias, C, M, N, K, BLOCK_M=16, BLOCK_N=64, BLOCK_K=64)
    return C
EOF

# CUDA: one thread per element of C, FP32 accumulation, on torch's current stream.
cat > "$WALK/my_cuda/kernel.cu" <<'EOF'
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_bf16.h>

__global__ void linear_bias(const __nv_bfloat16* A, const __nv_bfloat16* W,
                            const __nv_bfloat16* bias, __nv_bfloat16* C, int M, int N, int K) {
  int m = blockIdx.y, n = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= M || n >= N) return;
  float sum = 0.f;
  for (int k = 0; k < K; ++k)
    sum += __bfloat162float(A[m * K + k]) * __bfloat162float(W[n * K + k]);
  C[m * N + n] = __float2bfloat16(sum + __bfloat162float(bias[n]));
}

torch::Tensor run(torch::Tensor A, torch::Tensor W, torch::Tensor bias) {
  auto a = A.contiguous(), w = W.contiguous(), b = bias.contiguous();
  int M = a.size(0), K = a.size(1), N = w.size(0);
  auto C = torch::empty({M, N}, a.options().dtype(torch::kBFloat16));
  if (M == 0) return C;
  auto stream = at::cuda::getCurrentCUDAStream();
  linear_bias<<<dim3((N + 127) / 128, M), 128, 0, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(a.data_ptr()),
      reinterpret_cast<const __nv_bfloat16*>(w.data_ptr()),
      reinterpret_cast<const __nv_bfloat16*>(b.data_ptr()),
      reinterpret_cast<__nv_bfloat16*>(C.data_ptr()), M, N, K);
  return C;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
EOF

status=0
for language in ${LANGUAGES:-python triton cuda}; do
  started=$(date +%s)
  inference-kernels run -d $DEF --candidate "$WALK/my_$language" --device "${DEVICE:-cuda}" \
      --report "$WALK/my_$language.jsonl" --overwrite --cache "$WALK/cache" \
      > "$OUT/run-$language.log" 2>&1
  echo "run $language: exit $? after $(( $(date +%s) - started )) s" | tee -a "$OUT/run-$language.log"
  tail -12 "$OUT/run-$language.log"
done
inference-kernels report "$WALK"/my_*.jsonl -o "$WALK/report" || status=1
tar -C "$WALK" -czf "$OUT/walkthrough.tgz" --exclude cache . # the folders, rows and report
exit $status
