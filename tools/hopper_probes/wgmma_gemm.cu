// Probe for issue 29's design: a dense bf16 GEMM Y[r][o] = sum_k X[r][k] W[o][k] (fp32 out)
// on sm_90a's wgmma, fed by TMA with 128-byte swizzle, checked bit for bit against
// mma.sync in the engine's summation order (docs/numerics.md: 32-wide chunks, within a
// chunk the products of k % 8 < 4 in one instruction and the rest in a second; SPLIT:
// even and odd chunks in two sums as the engine does, else one sum).
//
// wgmma's B operand (the tokens, N = 128 or 256) comes from shared memory in rows of
// 16-byte core-matrix pieces, each piece 8 slots of one instruction. An instruction's sum
// depends on the set of products only (mma_swap.cu), but the engine's set for a chunk,
// k % 8 < 4, is not 8 contiguous k; so X is stored with each 32-chunk's 16 words
// transposed as a 4 x 4 matrix (word w at (w % 4) * 4 + w / 4): then bytes 32s..32s+31
// of the chunk are exactly instruction s's 16 k, and TMA loads them as they lie.
// W: RS: the engine's tiled layout (16 x 32 tiles) in 1D bulk copies, each lane's A
// fragment one 16-byte shared load, as mma32; SS: W permuted like X and loaded by TMA.
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -o wgmma_gemm wgmma_gemm.cu && ./wgmma_gemm
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <vector>
#include <random>
#include <cuda.h>
#include <cuda_runtime.h>

#include "../../kernels/hopper.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

typedef uint16_t bf16;
constexpr int BO = 128;  // outputs per block: 2 consumer warpgroups x 64
constexpr int KS = 64;   // k per stage: two 32-chunks
constexpr int STAGES = 4;
constexpr int WEIGHTS_STAGE = BO * KS * 2;

#define WGMMA_OUTS_64 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), \
  "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), \
  "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
  "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), \
  "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), \
  "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), \
  "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define WGMMA_OUTS_128 WGMMA_OUTS_64, \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), \
  "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), \
  "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), \
  "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), \
  "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), \
  "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), \
  "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), \
  "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define REGS_64 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27," \
  "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56," \
  "%57,%58,%59,%60,%61,%62,%63}"
#define REGS_128 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27," \
  "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56," \
  "%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85," \
  "%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
  "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"

// d += A B over one k16 step, m64 x N; A from registers (RS) or shared memory (SS)
template <int N> struct wgmma;
template <> struct wgmma<128> {
  static __device__ __forceinline__ void rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " REGS_64 ", {%64,%65,%66,%67}, %68, 1, 1, 1, 0;"
                 : WGMMA_OUTS_64 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
  }
  static __device__ __forceinline__ void ss(float (&d)[64], uint64_t a, uint64_t b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " REGS_64 ", %64, %65, 1, 1, 1, 0, 0;"
                 : WGMMA_OUTS_64 : "l"(a), "l"(b));
  }
};
template <> struct wgmma<256> {
  static __device__ __forceinline__ void rs(float (&d)[128], const uint32_t (&a)[4], uint64_t b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " REGS_128 ", {%128,%129,%130,%131}, %132, 1, 1, 1, 0;"
                 : WGMMA_OUTS_128 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
  }
  static __device__ __forceinline__ void ss(float (&d)[128], uint64_t a, uint64_t b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " REGS_128 ", %128, %129, 1, 1, 1, 0, 0;"
                 : WGMMA_OUTS_128 : "l"(a), "l"(b));
  }
};

// One block: 128 outputs x BT tokens; warpgroup 0 issues the copies, 1 and 2 multiply 64 outputs each.
template <int BT, bool SPLIT, bool SS>
__global__ void __launch_bounds__(384, 1) wgmma_gemm(const bf16 *__restrict__ W_tiled, float *__restrict__ Y, int rows,
                                                   int n, int k, const __grid_constant__ CUtensorMap xmap,
                                                   const __grid_constant__ CUtensorMap wmap) {
  constexpr int X_STAGE = BT * KS * 2, NR = BT / 2;
  extern __shared__ uint8_t smem_raw[];
  uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);  // swizzle atoms: 1 KiB aligned
  uint8_t *w_st = smem, *x_st = smem + STAGES * WEIGHTS_STAGE;
  uint64_t *full = (uint64_t *)(x_st + STAGES * X_STAGE), *empty = full + STAGES;
  const int chunks = (k + 31) / 32, stages = (chunks + 1) / 2;
  const int o0 = blockIdx.x * BO, t0 = blockIdx.y * BT, tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < STAGES; s++) { mbar_init(&full[s], 1); mbar_init(&empty[s], 2); }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (tid != 0) return;
    const int bands = min(BO / 16, (n - o0 + 15) / 16);
    for (int st = 0; st < stages; st++) {
      int slot = st % STAGES, nc = min(2, chunks - 2 * st);
      if (st >= STAGES) mbar_wait(&empty[slot], ((st / STAGES) - 1) & 1);
      mbar_expect_tx(&full[slot], X_STAGE + (SS ? WEIGHTS_STAGE : bands * nc * 1024));
      tma_2d(x_st + slot * X_STAGE, &xmap, st * KS, t0, &full[slot]);
      if (SS)
        tma_2d(w_st + slot * WEIGHTS_STAGE, &wmap, st * KS, o0, &full[slot]);
      else  // a band's two chunks are 2 KiB in a row
        for (int b = 0; b < bands; b++)
          bulk_copy(w_st + slot * WEIGHTS_STAGE + b * 2048, W_tiled + ((size_t)(o0 / 16 + b) * chunks + 2 * st) * 512,
                    nc * 1024, &full[slot]);
      mbar_arrive(&full[slot]);
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int cw = wg - 1, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  float acc[SPLIT ? 2 : 1][NR];
#pragma unroll
  for (int h = 0; h < (SPLIT ? 2 : 1); h++)
#pragma unroll
    for (int i = 0; i < NR; i++) acc[h][i] = 0.f;
  for (int st = 0; st < stages; st++) {
    int slot = st % STAGES;
    mbar_wait(&full[slot], (st / STAGES) & 1);
    const uint8_t *xs = x_st + slot * X_STAGE, *ws = w_st + slot * WEIGHTS_STAGE;
    const int steps = 2 * min(2, chunks - 2 * st);  // k16 instructions in this stage
    uint4 lo[2], hi[2];                               // RS: rows g and g + 8 of the warp's band, per chunk
    if (!SS)
#pragma unroll
      for (int ch = 0; ch < 2; ch++) {
        const uint8_t *band = ws + (cw * 4 + warp) * 2048 + ch * 1024;
        lo[ch] = *(const uint4 *)(band + g * 64 + t * 16);
        hi[ch] = *(const uint4 *)(band + (g + 8) * 64 + t * 16);
      }
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int i = 0; i < 4; i++) {
      if (i >= steps) break;
      float(&d)[NR] = acc[SPLIT ? i / 2 : 0];
      uint64_t b = swizzled_desc(xs + 32 * i);
      if (SS) {
        wgmma<BT>::ss(d, swizzled_desc(ws + cw * 64 * 128 + 32 * i), b);
      } else {  // instruction s of chunk ch: words 2s and 2s + 1 of each piece, as mma32
        const int ch = i / 2, s = i % 2;
        const uint32_t a[4] = {s ? lo[ch].z : lo[ch].x, s ? hi[ch].z : hi[ch].x, s ? lo[ch].w : lo[ch].y,
                               s ? hi[ch].w : hi[ch].y};
        wgmma<BT>::rs(d, a, b);
      }
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    if (tid % 128 == 0) mbar_arrive(&empty[slot]);
  }
  // element 4j + e: output 16 warp + g (+ 8 for e >= 2), token 8j + 2t + (e & 1)
  const int o = o0 + cw * 64 + 16 * warp + g;
#pragma unroll
  for (int j = 0; j < NR / 4; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      int oo = o + (e >= 2 ? 8 : 0), tok = t0 + 8 * j + 2 * t + (e & 1);
      float v = SPLIT ? acc[0][4 * j + e] + acc[SPLIT ? 1 : 0][4 * j + e] : acc[0][4 * j + e];
      if (oo < n && tok < rows) Y[(size_t)tok * n + oo] = v;
    }
}

// The reference: mma.sync as the engine's mma32, one warp per 16 x 8 tile, natural layouts.
template <bool SPLIT> __global__ void ref_gemm(const bf16 *X, const bf16 *W, float *Y, int rows, int n, int k) {
  int lane = threadIdx.x % 32, warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int ntile = (n + 7) / 8, rt = warp / ntile, nt = warp % ntile;
  if (rt * 16 >= rows) return;
  int g = lane / 4, t = lane % 4, chunks = (k + 31) / 32;
  float acc[2][4] = {};
  auto piece = [&](const bf16 *M, int r, int lim, int kk) {  // 8 bf16 of row r from kk, zero outside
    uint32_t w[4];
    for (int i = 0; i < 4; i++) {
      uint32_t lo = r < lim && kk + 2 * i < k ? M[(size_t)r * k + kk + 2 * i] : 0;
      uint32_t hi = r < lim && kk + 2 * i + 1 < k ? M[(size_t)r * k + kk + 2 * i + 1] : 0;
      w[i] = lo | hi << 16;
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  };
  for (int c = 0; c < chunks; c++) {
    uint4 x0 = piece(X, rt * 16 + g, rows, c * 32 + 8 * t), x1 = piece(X, rt * 16 + g + 8, rows, c * 32 + 8 * t);
    uint4 w0 = piece(W, nt * 8 + g, n, c * 32 + 8 * t);
    float *cc = acc[SPLIT ? c % 2 : 0];
    uint32_t xa[2][4] = {{x0.x, x1.x, x0.y, x1.y}, {x0.z, x1.z, x0.w, x1.w}}, wb[2][2] = {{w0.x, w0.y}, {w0.z, w0.w}};
    for (int s = 0; s < 2; s++)
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                   : "+f"(cc[0]), "+f"(cc[1]), "+f"(cc[2]), "+f"(cc[3])
                   : "r"(xa[s][0]), "r"(xa[s][1]), "r"(xa[s][2]), "r"(xa[s][3]), "r"(wb[s][0]), "r"(wb[s][1]));
  }
  for (int e = 0; e < 4; e++) {
    int r = rt * 16 + g + (e >= 2 ? 8 : 0), o = nt * 8 + 2 * t + (e & 1);
    if (r < rows && o < n) Y[(size_t)r * n + o] = acc[0][e] + acc[1][e];
  }
}

typedef CUresult (*encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *, const cuuint64_t *,
                              const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                              CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// [rows][kp] permuted bf16 on the device and its tensor map (boxes of 64 k x box_rows, 128-byte swizzle)
static bf16 *upload_permuted(const std::vector<uint16_t> &m, int rows, int k, int box_rows, CUtensorMap *map) {
  static encode_fn encode = nullptr;
  if (!encode) {
    void *f = nullptr;
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    encode = (encode_fn)f;
  }
  const int kp = (k + 31) / 32 * 32;
  std::vector<uint16_t> p((size_t)rows * kp, 0);
  for (int r = 0; r < rows; r++)
    for (int kk = 0; kk < k; kk++) {
      int w = (kk % 32) / 2, pos = (w % 4) * 4 + w / 4;
      p[(size_t)r * kp + kk / 32 * 32 + pos * 2 + kk % 2] = m[(size_t)r * k + kk];
    }
  bf16 *d;
  CK(cudaMalloc(&d, p.size() * 2));
  CK(cudaMemcpy(d, p.data(), p.size() * 2, cudaMemcpyHostToDevice));
  cuuint64_t dims[2] = {(cuuint64_t)kp, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)kp * 2};
  cuuint32_t box[2] = {KS, (cuuint32_t)box_rows}, es[2] = {1, 1};
  if (encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, d, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    printf("cuTensorMapEncodeTiled failed\n");
    exit(1);
  }
  return d;
}

template <int BT, bool SPLIT, bool SS> void run(const char *name) {
  auto kernel = wgmma_gemm<BT, SPLIT, SS>;
  const int smem = STAGES * (WEIGHTS_STAGE + BT * KS * 2) + 2 * STAGES * 8 + 1024;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  struct Shape { const char *name; int n, k; } shapes[] = {{"qkv", 5120, 2880}, {"o", 2880, 4096}, {"mlp1", 5760, 2880},
                                                          {"mlp2", 2880, 2880}, {"logits", 201088, 2880}, {"odd", 200, 100}};
  std::mt19937 rng(5);
  std::normal_distribution<float> gd(0, 1);
  auto to_bf16 = [](float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)(u >> 16); };
  for (int rows : {1024, 2048, 77})
    for (auto &sh : shapes) {
      if (rows == 77 && sh.n > 6000) continue;
      const int n = sh.n, k = sh.k, chunks = (k + 31) / 32, bands = (n + 15) / 16;
      std::vector<uint16_t> hx((size_t)rows * k), hw((size_t)n * k), ht((size_t)bands * chunks * 512, 0);
      for (auto &v : hx) v = to_bf16(gd(rng));
      for (auto &v : hw) v = to_bf16(gd(rng) * 0.05f);
      for (int o = 0; o < n; o++)  // the engine's tiled layout (kernels/layout.h)
        for (int kk = 0; kk < k; kk++)
          ht[((size_t)(o / 16) * chunks + kk / 32) * 512 + (o % 16) * 32 + kk % 32] = hw[(size_t)o * k + kk];
      CUtensorMap xmap, wmap;
      bf16 *dxp = upload_permuted(hx, rows, k, BT, &xmap), *dwp = upload_permuted(hw, n, k, BO, &wmap);
      bf16 *dx, *dw, *dt;
      float *dy, *dr;
      CK(cudaMalloc(&dx, hx.size() * 2)); CK(cudaMalloc(&dw, hw.size() * 2)); CK(cudaMalloc(&dt, ht.size() * 2));
      CK(cudaMalloc(&dy, (size_t)rows * n * 4)); CK(cudaMalloc(&dr, (size_t)rows * n * 4));
      CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dw, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dt, ht.data(), ht.size() * 2, cudaMemcpyHostToDevice));
      CK(cudaMemset(dy, 0xff, (size_t)rows * n * 4));
      dim3 grid((n + BO - 1) / BO, (rows + BT - 1) / BT);
      kernel<<<grid, 384, smem>>>(dt, dy, rows, n, k, xmap, wmap);
      CK(cudaGetLastError());
      long warps = (long)((rows + 15) / 16) * ((n + 7) / 8);
      ref_gemm<SPLIT><<<(warps * 32 + 255) / 256, 256>>>(dx, dw, dr, rows, n, k);
      CK(cudaDeviceSynchronize());
      std::vector<float> y((size_t)rows * n), r((size_t)rows * n);
      CK(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(r.data(), dr, r.size() * 4, cudaMemcpyDeviceToHost));
      long diff = 0;
      for (size_t i = 0; i < y.size(); i++) diff += memcmp(&y[i], &r[i], 4) != 0;
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0); cudaEventCreate(&e1);
      const int reps = 20;
      cudaEventRecord(e0);
      for (int i = 0; i < reps; i++) kernel<<<grid, 384, smem>>>(dt, dy, rows, n, k, xmap, wmap);
      cudaEventRecord(e1);
      CK(cudaEventSynchronize(e1));
      float ms;
      cudaEventElapsedTime(&ms, e0, e1);
      ms /= reps;
      printf("{\"variant\": \"%s\", \"shape\": \"%s\", \"rows\": %d, \"n\": %d, \"k\": %d, \"ms\": %.4f, \"tflops\": %.1f, "
             "\"bits_differ\": %ld}\n", name, sh.name, rows, n, k, ms, 2.0 * rows * n * k / (ms * 1e-3) / 1e12, diff);
      cudaFree(dx); cudaFree(dw); cudaFree(dt); cudaFree(dy); cudaFree(dr); cudaFree(dxp); cudaFree(dwp);
    }
}

int main() {
  run<128, true, false>("engine order, n128, W tiled (RS)");
  run<128, true, true>("engine order, n128, W permuted (SS)");
  run<256, false, false>("one sum, n256, W tiled (RS)");
  run<256, false, true>("one sum, n256, W permuted (SS)");
  return 0;
}
