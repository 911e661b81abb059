// Probe: do wgmma.m64n8k16 (A in registers, B from shared memory) and mma.sync.m16n8k16
// give the same fp32 bits for the same bf16 inputs and accumulators?
//   nvcc -gencode arch=compute_90a,code=sm_90a -O2 -o wgmma_bits wgmma_bits.cu && ./wgmma_bits
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <cuda_bf16.h>
#include <random>

__device__ inline uint64_t desc_b(const void *smem, int lbo, int sbo) {
  uint64_t a = (uint64_t)__cvta_generic_to_shared(smem);
  return ((a & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}

// A: [64][16] bf16 row-major (per trial), B: [8 n][16 k] bf16 (k contiguous), C: [64][8] f32.
// Each warp w handles rows 16w..16w+15 with mma.sync; the warpgroup does one wgmma.
__global__ void probe(const __nv_bfloat16 *A, const __nv_bfloat16 *B, const float *C, float *out_mma,
                      float *out_wg, int chain) {
  int trial = blockIdx.x;
  A += (size_t)trial * chain * 64 * 16; B += (size_t)trial * chain * 8 * 16; C += trial * 64 * 8;
  out_mma += trial * 64 * 8; out_wg += trial * 64 * 8;
  __shared__ __align__(128) __nv_bfloat16 sB[8][16 * 8]; // chain up to 8
  int t = threadIdx.x, w = t / 32, lane = t % 32;
  int r = 16 * w + lane / 4, c = (lane % 4) * 2;
  float acc_m[4], acc_w[4];
  acc_m[0] = C[r * 8 + c]; acc_m[1] = C[r * 8 + c + 1];
  acc_m[2] = C[(r + 8) * 8 + c]; acc_m[3] = C[(r + 8) * 8 + c + 1];
  for (int i = 0; i < 4; i++) acc_w[i] = acc_m[i];
  for (int s = 0; s < chain; s++) {
    const __nv_bfloat16 *As = A + s * 64 * 16, *Bs = B + s * 8 * 16;
    // B into smem as two 8x8 core matrices (k 0..7 then k 8..15), each 8 rows of 16 bytes
    for (int i = t; i < 128; i += 128) {
      int n = i / 16, k = i % 16;
      int core = k / 8;
      int idx = core * 64 + n * 8 + (k % 8);
      sB[s][idx] = Bs[n * 16 + k];
    }
    __syncthreads();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    uint32_t a[4];
    auto pack = [&](int row, int k) {
      __nv_bfloat16 lo = As[row * 16 + k], hi = As[row * 16 + k + 1];
      return (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
    };
    a[0] = pack(r, c); a[1] = pack(r + 8, c); a[2] = pack(r, c + 8); a[3] = pack(r + 8, c + 8);
    // mma.sync B fragment: b0 = B[k = c, c+1][n = lane/4], b1 = k + 8
    int n = lane / 4;
    uint32_t b[2];
    auto packb = [&](int k) {
      return (uint32_t)__bfloat16_as_ushort(Bs[n * 16 + k]) | ((uint32_t)__bfloat16_as_ushort(Bs[n * 16 + k + 1]) << 16);
    };
    b[0] = packb(c); b[1] = packb(c + 8);
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(acc_m[0]), "+f"(acc_m[1]), "+f"(acc_m[2]), "+f"(acc_m[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    uint64_t d = desc_b(&sB[s][0], 128, 256);
    asm volatile("wgmma.fence.sync.aligned;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, 1, 1, 1, 0;\n"
                 "wgmma.commit_group.sync.aligned;\n"
                 "wgmma.wait_group.sync.aligned 0;\n"
                 : "+f"(acc_w[0]), "+f"(acc_w[1]), "+f"(acc_w[2]), "+f"(acc_w[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(d)
                 : "memory");
  }
  out_mma[r * 8 + c] = acc_m[0]; out_mma[r * 8 + c + 1] = acc_m[1];
  out_mma[(r + 8) * 8 + c] = acc_m[2]; out_mma[(r + 8) * 8 + c + 1] = acc_m[3];
  out_wg[r * 8 + c] = acc_w[0]; out_wg[r * 8 + c + 1] = acc_w[1];
  out_wg[(r + 8) * 8 + c] = acc_w[2]; out_wg[(r + 8) * 8 + c + 1] = acc_w[3];
}

static float bf(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }

int main() {
  const int trials = 4096;
  std::mt19937_64 rng(1);
  for (int chain : {1, 2, 8}) for (int wide = 0; wide < 2; wide++) {
    size_t na = (size_t)trials * chain * 64 * 16, nb = (size_t)trials * chain * 8 * 16, nc = (size_t)trials * 64 * 8;
    uint16_t *hA = new uint16_t[na], *hB = new uint16_t[nb];
    float *hC = new float[nc];
    std::normal_distribution<float> g(0, 1);
    std::uniform_int_distribution<int> e(-20, 20);
    auto gen = [&]() {
      float x = g(rng) * (wide ? ldexpf(1, e(rng)) : 1.0f);
      uint32_t u; memcpy(&u, &x, 4); return (uint16_t)(u >> 16);
    };
    for (size_t i = 0; i < na; i++) hA[i] = gen();
    for (size_t i = 0; i < nb; i++) hB[i] = gen();
    for (size_t i = 0; i < nc; i++) { float x = g(rng) * (wide ? ldexpf(1, e(rng)) : 4.0f); hC[i] = x; }
    void *dA, *dB, *dC, *dM, *dW;
    cudaMalloc(&dA, na * 2); cudaMalloc(&dB, nb * 2); cudaMalloc(&dC, nc * 4); cudaMalloc(&dM, nc * 4); cudaMalloc(&dW, nc * 4);
    cudaMemcpy(dA, hA, na * 2, cudaMemcpyHostToDevice); cudaMemcpy(dB, hB, nb * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dC, hC, nc * 4, cudaMemcpyHostToDevice);
    probe<<<trials, 128>>>((const __nv_bfloat16 *)dA, (const __nv_bfloat16 *)dB, (const float *)dC, (float *)dM,
                           (float *)dW, chain);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) { printf("error %s\n", cudaGetErrorString(err)); return 1; }
    float *hM = new float[nc], *hW = new float[nc];
    cudaMemcpy(hM, dM, nc * 4, cudaMemcpyDeviceToHost); cudaMemcpy(hW, dW, nc * 4, cudaMemcpyDeviceToHost);
    // correctness of mma vs a double reference, and bit agreement with wgmma
    long diff = 0; double maxrel_m = 0, maxrel_w = 0;
    for (int tr = 0; tr < trials; tr++) for (int r = 0; r < 64; r++) for (int n = 0; n < 8; n++) {
      double ref = hC[tr * 512 + r * 8 + n];
      for (int s = 0; s < chain; s++) for (int k = 0; k < 16; k++)
        ref += (double)bf(hA[((size_t)tr * chain + s) * 1024 + r * 16 + k]) * bf(hB[((size_t)tr * chain + s) * 128 + n * 16 + k]);
      size_t i = (size_t)tr * 512 + r * 8 + n;
      double den = fabs(ref) > 1e-30 ? fabs(ref) : 1;
      maxrel_m = fmax(maxrel_m, fabs(hM[i] - ref) / den); maxrel_w = fmax(maxrel_w, fabs(hW[i] - ref) / den);
      uint32_t a, b; memcpy(&a, &hM[i], 4); memcpy(&b, &hW[i], 4); diff += a != b;
    }
    printf("chain %d wide %d: outputs %zu, bits differ %ld, max rel err mma %.3g wgmma %.3g\n", chain, wide, nc, diff,
           maxrel_m, maxrel_w);
    cudaFree(dA); cudaFree(dB); cudaFree(dC); cudaFree(dM); cudaFree(dW);
    delete[] hA; delete[] hB; delete[] hC; delete[] hM; delete[] hW;
  }
  return 0;
}
