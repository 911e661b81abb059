// Probe: is mma.sync.m16n8k16's fp32 result invariant to (1) swapping the operands
// (C^T = B^T A^T computed with W as A) and (2) permuting the 16 k slots consistently?
//   nvcc -gencode arch=compute_90a,code=sm_90a -O2 -o mma_swap mma_swap.cu && ./mma_swap
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <random>
#include <cuda_bf16.h>

__device__ inline void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ inline uint32_t pk(const uint16_t *m, int ld, int r, int k0, int k1) {
  return (uint32_t)m[r * ld + k0] | ((uint32_t)m[r * ld + k1] << 16);
}
// X: [16][16] (rows, k), W: [16][16] (outputs, k), C0: [16][16] accumulators (row, output).
// mode 0: X as A, W as B (two n8 instructions); mode 1: W as A, X as B (two n8); out[row][output].
// perm: k slot s holds k = perm[s] (same for both operands).
__global__ void run(const uint16_t *X, const uint16_t *W, const float *C0, float *out, int mode, const int *perm) {
  int trial = blockIdx.x, lane = threadIdx.x, g = lane / 4, t = lane % 4;
  X += trial * 256; W += trial * 256; C0 += trial * 256; out += trial * 256;
  const uint16_t *A = mode == 0 ? X : W, *B = mode == 0 ? W : X;
  int p0 = perm[2 * t], p1 = perm[2 * t + 1], p8 = perm[2 * t + 8], p9 = perm[2 * t + 9];
  uint32_t a[4] = {pk(A, 16, g, p0, p1), pk(A, 16, g + 8, p0, p1), pk(A, 16, g, p8, p9), pk(A, 16, g + 8, p8, p9)};
  for (int h = 0; h < 2; h++) {
    uint32_t b[2] = {pk(B, 16, 8 * h + g, p0, p1), pk(B, 16, 8 * h + g, p8, p9)};
    // accumulator element (m = g or g+8, n = 8h + 2t + {0,1})
    int m0 = g, m1 = g + 8, n0 = 8 * h + 2 * t;
    auto at = [&](int m, int n) { return mode == 0 ? m * 16 + n : n * 16 + m; };
    float c[4] = {C0[at(m0, n0)], C0[at(m0, n0 + 1)], C0[at(m1, n0)], C0[at(m1, n0 + 1)]};
    mma(c, a, b);
    out[at(m0, n0)] = c[0]; out[at(m0, n0 + 1)] = c[1]; out[at(m1, n0)] = c[2]; out[at(m1, n0 + 1)] = c[3];
  }
}

int main() {
  const int trials = 65536, n = trials * 256;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> gd(0, 1);
  std::uniform_int_distribution<int> e(-24, 24);
  uint16_t *hX = new uint16_t[n], *hW = new uint16_t[n];
  float *hC = new float[n];
  for (int wide = 0; wide < 2; wide++) {
    auto gen = [&]() { float x = gd(rng) * (wide ? ldexpf(1, e(rng)) : 1.0f); uint32_t u; memcpy(&u, &x, 4); return (uint16_t)(u >> 16); };
    for (int i = 0; i < n; i++) { hX[i] = gen(); hW[i] = gen(); hC[i] = gd(rng) * (wide ? ldexpf(1, e(rng)) : 3.0f); }
    uint16_t *dX, *dW; float *dC, *dO; int *dP;
    cudaMalloc(&dX, n * 2); cudaMalloc(&dW, n * 2); cudaMalloc(&dC, n * 4); cudaMalloc(&dO, 4 * (size_t)n * 4); cudaMalloc(&dP, 16 * 4);
    cudaMemcpy(dX, hX, n * 2, cudaMemcpyHostToDevice); cudaMemcpy(dW, hW, n * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dC, hC, n * 4, cudaMemcpyHostToDevice);
    int ident[16], rev[16], mix[16];
    for (int i = 0; i < 16; i++) { ident[i] = i; rev[i] = 15 - i; mix[i] = (i * 5 + 3) % 16; }
    const int *perms[3] = {ident, rev, mix};
    float *res[4];
    int cfg[4][2] = {{0, 0}, {1, 0}, {0, 1}, {0, 2}};
    for (int c = 0; c < 4; c++) {
      cudaMemcpy(dP, perms[cfg[c][1]], 64, cudaMemcpyHostToDevice);
      run<<<trials, 32>>>(dX, dW, dC, dO + (size_t)c * n, cfg[c][0], dP);
      res[c] = new float[n];
    }
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) { printf("error %s\n", cudaGetErrorString(err)); return 1; }
    for (int c = 0; c < 4; c++) cudaMemcpy(res[c], dO + (size_t)c * n, n * 4, cudaMemcpyDeviceToHost);
    const char *names[4] = {"X as A (reference)", "W as A (swapped)", "slots reversed", "slots permuted 5i+3"};
    for (int c = 1; c < 4; c++) {
      long d = 0;
      for (int i = 0; i < n; i++) d += memcmp(&res[0][i], &res[c][i], 4) != 0;
      printf("wide %d: %-22s vs reference: %ld of %d outputs differ in bits\n", wide, names[c], d, n);
    }
    cudaFree(dX); cudaFree(dW); cudaFree(dC); cudaFree(dO); cudaFree(dP);
  }
  return 0;
}
