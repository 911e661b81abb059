// The engine's own GEMM dispatch (kernels/gemm.hip) timed on one decode step's
// shapes of the 20b at a given row count, each GEMM twice: as a device with the
// Hopper GEMM and the streaming kernel's 8-row tiles runs it and as one with
// neither (the mma.sync families' 16-row and larger tiles), the two outputs
// compared bit for bit. Dense: qkv, o, the unembedding ([n][k] bf16
// weights); grouped: mlp1 (SwiGLU) and mlp2 over top-4 routing, random or
// skewed (empty experts, one-row experts, an expert with every row), with
// the tile table each path asks for (gptoss_moe_tile_rows), the experts'
// weights as [n][k] rows, bf16 tiles or MXFP4 tiles (layout.h; random codes,
// scales of 2^-7 .. 2^3), as --weights says; --force-hopper gives the
// Hopper path its 128-row tiles at any rows per expert (where the engine
// would stream at up to 16). Timings are the mean of 10 launches, each GEMM
// over weights of its own that L2 cannot hold between launches except
// qkv's and o's; the experts' TB/s are the routed experts' weight bytes over
// the time. Exits 1 if any output differs. Built with -DGPTOSS_WG_TIMELINE,
// it also prints where block 0 of the Hopper GEMM's last launch of each
// expert GEMM spent its stages (gemm_wgmma.h's stamps; they slow it).
//   nvcc -x cu -std=c++17 -O3 -D__HIP_PLATFORM_NVIDIA__ -isystem <hip headers>
//        -gencode arch=compute_90a,code=sm_90a -fmad=false -o engine_gemm engine_gemm.cu
//   ./engine_gemm [--hidden 2880] [--inter 2880] [--routing uniform|skewed]
//                 [--weights rows|tiled|mxfp4] [--experts-only] [--force-hopper] [rows ...]
#include "../../kernels/gemm.hip"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#define CK(x)                                                                                                     \
    do {                                                                                                          \
        hipError_t e_ = (x);                                                                                      \
        if (e_ != hipSuccess) {                                                                                   \
            printf("%s:%d %s\n", __FILE__, __LINE__, hipGetErrorString(e_));                                     \
            exit(1);                                                                                              \
        }                                                                                                         \
    } while (0)

static void *device_random_bf16(size_t n, uint32_t seed) {
    std::vector<uint16_t> h(n);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto &v : h) {
        float f = u(rng) * 0.05f;
        uint32_t b;
        memcpy(&b, &f, 4);
        v = (uint16_t)(b >> 16);
    }
    void *d;
    CK(hipMalloc(&d, n * 2));
    CK(hipMemcpy(d, h.data(), n * 2, hipMemcpyHostToDevice));
    return d;
}

// E MXFP4-tiled [n][k] matrices: random codes, each tile's scale bytes 2^-7 .. 2^3
static void *device_random_mxfp4(int E, int n, int k, uint32_t seed) {
    const size_t per = gptoss_mxfp4_tiled_bytes(n, k), tiles = per / GPTOSS_MXFP4_TILE_BYTES * E;
    std::vector<uint8_t> h(per * E);
    std::mt19937 rng(seed);
    for (size_t t = 0; t < tiles; t++) {
        uint8_t *tile = h.data() + t * GPTOSS_MXFP4_TILE_BYTES;
        for (int i = 0; i < GPTOSS_MXFP4_TILE_CODES; i++)
            tile[i] = (uint8_t)rng();
        for (int i = 0; i < GPTOSS_TILE_ROWS; i++) /* the bf16 exponent field of 2^(s - 1), s = -6 .. 4 */
            tile[GPTOSS_MXFP4_TILE_CODES + i] = (uint8_t)(120 + rng() % 11);
    }
    void *d;
    CK(hipMalloc(&d, h.size()));
    CK(hipMemcpy(d, h.data(), h.size(), hipMemcpyHostToDevice));
    return d;
}

#if defined(GPTOSS_WG_TIMELINE)
// The median cycles of each part of block 0's stages in the last launch (stamps zeroed before it).
static void print_timeline(const char *name) {
    static long long t[WG_EVENTS][WG_TIMELINE_MAX];
    CK(hipMemcpyFromSymbol(t, HIP_SYMBOL(wg_timeline), sizeof t, 0, hipMemcpyDeviceToHost));
    std::vector<long long> parts[7];
    const char *labels[7] = {"consumer waits for the stage", "consumer makes A",
                             "issue to the stage before done", "a stage, consumer", "producer waits for a slot",
                             "item's epilogue", "copies issued to stage in"};
    int stages = 0;
    while (stages < WG_TIMELINE_MAX && t[WG_EV_PREV_DONE][stages])
        stages++;
    for (int at = 1; at < stages; at++) {
        const bool first_of_item = t[WG_EV_ITEM_DONE][at - 1] != 0;
        if (!first_of_item) {
            parts[0].push_back(t[WG_EV_FULL][at] - t[WG_EV_PREV_DONE][at - 1]);
            parts[3].push_back(t[WG_EV_PREV_DONE][at] - t[WG_EV_PREV_DONE][at - 1]);
        }
        parts[1].push_back(t[WG_EV_LOADED][at] - t[WG_EV_FULL][at]);
        parts[2].push_back(t[WG_EV_PREV_DONE][at] - t[WG_EV_LOADED][at]);
        parts[4].push_back(t[WG_EV_SLOT_FREE][at] - t[WG_EV_ISSUED][at - 1]);
        if (t[WG_EV_ITEM_DONE][at])
            parts[5].push_back(t[WG_EV_ITEM_DONE][at] - t[WG_EV_PREV_DONE][at]);
        parts[6].push_back(t[WG_EV_FULL][at] - t[WG_EV_ISSUED][at]);
    }
    printf("  %s timeline, block 0, %d stages (median cycles):", name, stages);
    for (int i = 0; i < 7; i++) {
        auto &v = parts[i];
        std::sort(v.begin(), v.end());
        printf(" %s %lld;", labels[i], v.empty() ? -1LL : v[v.size() / 2]);
    }
    printf("\n");
}
static void clear_timeline() {
    static long long zeros[WG_EVENTS][WG_TIMELINE_MAX];
    CK(hipMemcpyToSymbol(HIP_SYMBOL(wg_timeline), zeros, sizeof zeros, 0, hipMemcpyHostToDevice));
}
#endif

struct timed {
    float ms;
    std::vector<uint8_t> out;
};

// launches gemm `reps` times (weights[i % copies]), returns the mean time and the output bytes
static timed run(gptoss_gemm_args a, const std::vector<const void *> &weights, int max_tiles,
                 const gptoss_gpu_shape &dev, void *out, size_t out_bytes, int reps) {
    hipEvent_t e0, e1;
    CK(hipEventCreate(&e0));
    CK(hipEventCreate(&e1));
    CK(hipMemset(out, 0, out_bytes));
    a.w = weights[0];
    CK(gptoss_launch_gemm(&a, max_tiles, &dev, 0));
    CK(hipDeviceSynchronize());
    timed t;
    t.out.resize(out_bytes);
    CK(hipMemcpy(t.out.data(), out, out_bytes, hipMemcpyDeviceToHost));
    CK(hipEventRecord(e0, 0));
    for (int i = 0; i < reps; i++) {
        a.w = weights[i % weights.size()];
        CK(gptoss_launch_gemm(&a, max_tiles, &dev, 0));
    }
    CK(hipEventRecord(e1, 0));
    CK(hipEventSynchronize(e1));
    CK(hipEventElapsedTime(&t.ms, e0, e1));
    t.ms /= reps;
    return t;
}

// the tile table moe_dispatch.hip builds: pairs sorted by expert (stable), tiles of tile_rows
static int tile_table(const std::vector<int> &expert_of_pair_sorted, int E, int tile_rows, std::vector<int> &tiles) {
    tiles.clear();
    int P = (int)expert_of_pair_sorted.size(), b = 0;
    for (int e = 0; e < E; e++) {
        int end = b;
        while (end < P && expert_of_pair_sorted[end] == e)
            end++;
        for (int t = b; t < end; t += tile_rows)
            tiles.insert(tiles.end(), {e, t, std::min(t + tile_rows, end), 0});
        b = end;
    }
    return (int)tiles.size() / 4;
}

// Row r's K experts (distinct). uniform: random. skewed: the cases uniform
// routing never makes - expert 0 takes every row, 2 and 3 one row each, 1 the
// even rows, 8..12 a tenth, 13..19 a seventh, 20..22 a third, 4..7 and 23..31 none.
static void route(int r, bool skewed, std::mt19937 &rng, int E, int K, std::vector<std::pair<int, int>> &pairs) {
    if (skewed) {
        const int e[4] = {0, r % 2 == 0 ? 1 : 8 + r % 5, r == 0 ? 2 : r == 1 ? 3 : 13 + r % 7, 20 + r % 3};
        for (int j = 0; j < K; j++)
            pairs.push_back({e[j], r});
        return;
    }
    std::vector<int> all(E);
    for (int e = 0; e < E; e++)
        all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    for (int j = 0; j < K; j++)
        pairs.push_back({all[j], r});
}

int main(int argc, char **argv) {
    const int E = 32, K = 4, Q = 5120, HqD = 4096, V = 201088, reps = 10;
    int H = 2880, I = 2880;
    bool skewed = false, experts_only = false, force_hopper = false;
    std::string weights = "rows";
    std::vector<int> row_counts;
    for (int i = 1; i < argc; i++) {
        const std::string arg = argv[i];
        if (arg == "--hidden" && i + 1 < argc)
            H = atoi(argv[++i]);
        else if (arg == "--inter" && i + 1 < argc)
            I = atoi(argv[++i]);
        else if (arg == "--routing" && i + 1 < argc)
            skewed = std::string(argv[++i]) == "skewed";
        else if (arg == "--weights" && i + 1 < argc)
            weights = argv[++i];
        else if (arg == "--experts-only")
            experts_only = true;
        else if (arg == "--force-hopper")
            force_hopper = true;
        else
            row_counts.push_back(atoi(argv[i]));
    }
    int differ = 0;
    if (row_counts.empty())
        row_counts = {256, 1024, 2048};
    gptoss_gpu_shape with = {}, without;
    CK(hipDeviceGetAttribute(&with.warp, hipDeviceAttributeWarpSize, 0));
    CK(hipDeviceGetAttribute(&with.multiprocessors, hipDeviceAttributeMultiprocessorCount, 0));
    CK(hipDeviceGetAttribute(&with.shared_per_sm, hipDeviceAttributeMaxSharedMemoryPerMultiprocessor, 0));
    with.wgmma = gptoss_gemm_wgmma_built(0);
    with.narrow = gptoss_gemm_narrow_built(0);
    without = with;
    without.wgmma = without.narrow = 0;
    if (!with.wgmma)
        printf("this build or device has no Hopper GEMM: both columns run the mma.sync families\n");

    if (weights != "rows" && weights != "tiled" && weights != "mxfp4") {
        printf("--weights: '%s' is not rows, tiled or mxfp4\n", weights.c_str());
        return 2;
    }
    // weights: 2 copies of each dense matrix, 2 layers of experts
    std::vector<const void *> w_qkv, w_o, w_un, w_m1, w_m2;
    auto experts = [&](int n, int k, uint32_t seed) {
        return weights == "mxfp4"   ? device_random_mxfp4(E, n, k, seed)
               : weights == "tiled" ? device_random_bf16((size_t)E * gptoss_tiled_elems(n, k), seed)
                                    : device_random_bf16((size_t)E * n * k, seed);
    };
    for (int c = 0; c < 2; c++) {
        if (!experts_only) {
            w_qkv.push_back(device_random_bf16((size_t)Q * H, 10 + c));
            w_o.push_back(device_random_bf16((size_t)H * HqD, 20 + c));
            w_un.push_back(device_random_bf16((size_t)V * H, 30 + c));
        }
        w_m1.push_back(experts(2 * I, H, 40 + c));
        w_m2.push_back(experts(H, I, 50 + c));
    }
    int max_rows = *std::max_element(row_counts.begin(), row_counts.end()), maxP = max_rows * K;
    void *x = device_random_bf16((size_t)maxP * std::max(H, HqD), 60);
    void *perm, *act;
    float *y, *bias;
    int *pair_row, *tiles, *tile_count;
    CK(hipMalloc(&perm, (size_t)maxP * std::max(HqD, I) * 2));
    CK(hipMalloc(&act, (size_t)maxP * I * 2));
    CK(hipMalloc((void **)&y, (size_t)max_rows * V * 4));
    CK(hipMalloc((void **)&bias, (size_t)E * 2 * I * 4));
    CK(hipMemset(bias, 0, (size_t)E * 2 * I * 4));
    CK(hipMalloc((void **)&pair_row, (size_t)maxP * 4));
    CK(hipMalloc((void **)&tiles, (size_t)(maxP + E) * 16));
    CK(hipMalloc((void **)&tile_count, 4));

    printf("%6s %-6s %10s %10s %9s %9s %s\n", "rows", "gemm", "with ms", "without ms", "TFLOP/s", "speedup", "bits");
    // bytes of one expert's matrix of n x k as the experts lie
    auto expert_bytes = [&](int n, int k) {
        return weights == "mxfp4"   ? (double)gptoss_mxfp4_tiled_bytes(n, k)
               : weights == "tiled" ? 2.0 * gptoss_tiled_elems(n, k)
                                    : 2.0 * n * k;
    };
    for (int R : row_counts) {
        auto dense = [&](const char *name, int n, int k, const std::vector<const void *> &w) {
            gptoss_gemm_args a = {};
            a.x = x;
            a.rows = R;
            a.n = n;
            a.k = k;
            a.epilogue = GPTOSS_GEMM_STORE;
            a.y = y;
            a.x_perm = perm;
            size_t bytes = (size_t)R * n * 4;
            timed h = run(a, w, 0, with, y, bytes, reps), o = run(a, w, 0, without, y, bytes, reps);
            double tf = 2.0 * R * n * k / (h.ms * 1e-3) / 1e12;
            differ += h.out != o.out;
            printf("%6d %-6s %10.3f %10.3f %9.1f %9.2f %s%s\n", R, name, h.ms, o.ms, tf, o.ms / h.ms,
                   h.out == o.out ? "same" : "DIFFER",
                   gemm_wgmma_takes(&a, &with) ? ""
                   : with.narrow && R <= NARROW_ROWS ? " (8-row tiles)"
                                                     : " (no hopper)");
        };
        if (!experts_only) {
            dense("qkv", Q, H, w_qkv);
            dense("o", H, HqD, w_o);
            dense("logits", V, H, w_un);
        }

#ifndef DENSE_ONLY
        // top-4 routing, pairs sorted by expert
        const int P = R * K;
        std::mt19937 rng(70 + R);
        std::vector<std::pair<int, int>> pairs; // (expert, row)
        for (int r = 0; r < R; r++)
            route(r, skewed, rng, E, K, pairs);
        std::stable_sort(pairs.begin(), pairs.end(), [](auto &a, auto &b) { return a.first < b.first; });
        std::vector<int> rows_of(P), experts(P);
        for (int p = 0; p < P; p++) {
            experts[p] = pairs[p].first;
            rows_of[p] = pairs[p].second;
        }
        CK(hipMemcpy(pair_row, rows_of.data(), (size_t)P * 4, hipMemcpyHostToDevice));
        gptoss_gemm_args m1 = {};
        m1.x = x;
        m1.x_rows = pair_row;
        m1.bias = bias;
        m1.rows = P;
        m1.n = 2 * I;
        m1.k = H;
        m1.tiles = tiles;
        m1.tile_count = tile_count;
        m1.n_experts = E;
        m1.epilogue = GPTOSS_GEMM_SWIGLU;
        m1.act = act;
        m1.swiglu_limit = 7.0f;
        m1.x_perm = perm;
        m1.w_layout = weights == "rows"    ? GPTOSS_W_BF16_ROWS
                      : weights == "tiled" ? GPTOSS_W_BF16_TILES
                                           : GPTOSS_W_MXFP4_TILES;
        gptoss_gemm_args m2 = m1;
        m2.x = act;
        m2.x_rows = nullptr;
        m2.n = H;
        m2.k = I;
        m2.epilogue = GPTOSS_GEMM_STORE;
        m2.y = y;
        timed res[2][2];
        float flops[2] = {2.0f * P * 2 * I * H, 2.0f * P * H * I};
        int tile_rows[2];
        for (int path = 0; path < 2; path++) {
            const gptoss_gpu_shape &dev = path == 0 ? with : without;
            m1.tile_rows = m2.tile_rows = tile_rows[path] = gptoss_moe_tile_rows(&m1, &m2, (P + E - 1) / E, &dev);
            if (force_hopper && path == 0 && gemm_wgmma_fits(&m1, &dev) && gemm_wgmma_fits(&m2, &dev))
                m1.tile_rows = m2.tile_rows = tile_rows[path] = WG_TILE_ROWS;
            std::vector<int> table;
            int count = tile_table(experts, E, m1.tile_rows, table);
            CK(hipMemcpy(tiles, table.data(), table.size() * 4, hipMemcpyHostToDevice));
            CK(hipMemcpy(tile_count, &count, 4, hipMemcpyHostToDevice));
            int max_tiles = (int)gptoss_moe_max_tiles(R, K, E, m1.tile_rows);
#if defined(GPTOSS_WG_TIMELINE)
            clear_timeline();
#endif
            res[path][0] = run(m1, w_m1, max_tiles, dev, act, (size_t)P * I * 2, reps);
#if defined(GPTOSS_WG_TIMELINE)
            if (path == 0)
                print_timeline("mlp1");
            clear_timeline();
#endif
            res[path][1] = run(m2, w_m2, max_tiles, dev, y, (size_t)P * H * 4, reps);
#if defined(GPTOSS_WG_TIMELINE)
            if (path == 0)
                print_timeline("mlp2");
#endif
        }
        int routed = 0; // experts with pairs (the pairs are sorted by expert)
        for (int p = 0; p < P; p++)
            routed += p == 0 || experts[p] != experts[p - 1];
        const double bytes[2] = {routed * expert_bytes(2 * I, H), routed * expert_bytes(H, I)};
        for (int g = 0; g < 2; g++) {
            differ += res[0][g].out != res[1][g].out;
            printf("%6d %-6s %10.3f %10.3f %9.1f %9.2f %s (tiles of %d and %d rows; %.2f and %.2f TB/s)\n", R,
                   g ? "mlp2" : "mlp1", res[0][g].ms, res[1][g].ms, flops[g] / (res[0][g].ms * 1e-3) / 1e12,
                   res[1][g].ms / res[0][g].ms, res[0][g].out == res[1][g].out ? "same" : "DIFFER", tile_rows[0],
                   tile_rows[1], bytes[g] / (res[0][g].ms * 1e-3) / 1e12, bytes[g] / (res[1][g].ms * 1e-3) / 1e12);
        }
#endif
    }
    printf("%d of the GEMMs differ\n", differ);
    return differ ? 1 : 0;
}
