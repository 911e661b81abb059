# The MXFP4 experts' Hopper kernel (kernels/gemm_wgmma_coded.h) as a timeline: a copy of the tree's
# kernels in which block 0's roles stamp clock64 after each of their waits (mlp1 launches only),
# engine_gemm over that copy, and the median cycles of each part of a stage. The stamps cost about
# 12% of the kernel's time. From the repository root on an NVIDIA Hopper machine, after
# `make gpu-machine-prefix` (its HIP headers):
#   python3 tools/hopper_probes/coded_timeline.py [--rows 2048] [--out trace.txt]
#   python3 tools/hopper_probes/coded_timeline.py --summarize trace.txt
import argparse, os, shutil, statistics, subprocess, sys, tempfile

EVENTS = ["XE", "CE", "DC", "DA", "DF", "CX", "CA", "CW", "EPS", "EPE"]
MEANING = {
    "XE": "rows' copy issued (its slot free)", "CE": "codes' copy issued", "DC": "decoder: codes in",
    "DA": "decoder: decoded slot free", "DF": "decoder: stage decoded", "CX": "consumer: rows in",
    "CA": "consumer: decoded weights in", "CW": "consumer: issued, previous group done",
    "EPS": "item's epilogue starts", "EPE": "item's epilogue ends",
}

STAMPS = f"""
enum {{ {", ".join("TL_" + e for e in EVENTS)}, TL_EVENTS }};
constexpr int TL_MAX = 512;
__device__ long long coded_timeline[TL_EVENTS][TL_MAX];
/* block 0's stamp of event ev at stage (or item) i, t0 < 0: not traced */
__device__ __forceinline__ void stamp(int ev, int i, long long t0) {{
    if (blockIdx.x == 0 && t0 >= 0 && i < TL_MAX)
        coded_timeline[ev][i] = clock64() - t0;
}}
"""

# (anchor, replacement[, occurrences: 1]) over kernels/gemm_wgmma_coded.h
KERNEL_EDITS = [
    ("namespace {\n", "namespace {\n" + STAMPS),
    ("const CUtensorMap *xmap_group, const CUtensorMap *code_map) {",
     "const CUtensorMap *xmap_group, const CUtensorMap *code_map, long long t0) {"),
    ("                    mbar_wait(b.x_empty(p.slot), p.parity ^ 1);\n",
     "                    mbar_wait(b.x_empty(p.slot), p.parity ^ 1);\n                stamp(TL_XE, at, t0);\n"),
    ("                    mbar_wait(b.code_empty(p.slot), p.parity ^ 1);\n",
     "                    mbar_wait(b.code_empty(p.slot), p.parity ^ 1);\n                stamp(TL_CE, at, t0);\n"),
    ("const wc_bars<W> b, int chunks, int warp, int lane) {",
     "const wc_bars<W> b, int chunks, int warp, int lane, long long t0) {"),
    ("            mbar_wait(b.code_full(pc.slot), pc.parity);\n",
     "            mbar_wait(b.code_full(pc.slot), pc.parity);\n"
     "            if (warp == 0 && lane == 0) stamp(TL_DC, at, t0);\n"),
    ("                mbar_wait(b.a_empty(pa.slot), pa.parity ^ 1);\n",
     "                mbar_wait(b.a_empty(pa.slot), pa.parity ^ 1);\n"
     "            if (warp == 0 && lane == 0) stamp(TL_DA, at, t0);\n"),
    ("                mbar_arrive(b.a_full(pa.slot));\n",
     "                mbar_arrive(b.a_full(pa.slot));\n                if (warp == 0) stamp(TL_DF, at, t0);\n"),
    ("int half, int ring_at) {", "int half, int ring_at, long long t0) {", 2),  # wc_consume, wc_consume_rows
    ("half, ring_at);", "half, ring_at, t0);", 2),  # their calls inside wc_consume_rows
    ("        mbar_wait(b.x_full(px.slot), px.parity);\n",
     "        mbar_wait(b.x_full(px.slot), px.parity);\n"
     "        if (threadIdx.x == 256) stamp(TL_CX, ring_at + st, t0);\n"),
    ("        mbar_wait(b.a_full(pa.slot), pa.parity);\n",
     "        mbar_wait(b.a_full(pa.slot), pa.parity);\n"
     "        if (threadIdx.x == 256) stamp(TL_CA, ring_at + st, t0);\n"),
    ("        wg_commit();\n        wg_wait<1>();\n",
     "        wg_commit();\n        wg_wait<1>();\n"
     "        if (threadIdx.x == 256) stamp(TL_CW, ring_at + st, t0);\n"),
    ("    __syncthreads();\n    if (wg == 0) {",
     "    __syncthreads();\n    const long long t0 = a.epilogue == GPTOSS_GEMM_SWIGLU ? clock64() : -1;\n"
     "    if (wg == 0) {"),
    ("&xmap_tile, &xmap_group, &code_map);", "&xmap_tile, &xmap_group, &code_map, t0);"),  # wc_produce's
    ("chunks, warp, lane);", "chunks, warp, lane, t0);"),  # wc_decode's call
    ("        wc_consume_rows<1, W>(groups, acc, ring, b, chunks, half, at);\n        at += stages;\n",
     "        wc_consume_rows<1, W>(groups, acc, ring, b, chunks, half, at, t0);\n"
     "        if (tid == 256) stamp(TL_EPS, at / stages, t0);\n        at += stages;\n"),
    ("                      tid - (wc_roles::THREADS - WG_CONSUMERS));\n",
     "                      tid - (wc_roles::THREADS - WG_CONSUMERS));\n"
     "        if (tid == 256) stamp(TL_EPE, at / stages - 1, t0);\n"),
]

# engine_gemm writes the last traced launch's stamps where TIMELINE_OUT says
PROBE_EDITS = [
    ('    printf("%d of the GEMMs differ\\n", differ);',
     '    {\n        static long long h[TL_EVENTS][TL_MAX];\n'
     '        CK(hipMemcpyFromSymbol(h, HIP_SYMBOL(coded_timeline), sizeof h, 0, hipMemcpyDeviceToHost));\n'
     '        FILE *f = fopen(getenv("TIMELINE_OUT"), "w");\n'
     f'        fprintf(f, "at {" ".join(EVENTS)}\\n");\n'
     '        for (int i = 0; i < TL_MAX; i++) {\n            fprintf(f, "%d", i);\n'
     '            for (int e = 0; e < TL_EVENTS; e++)\n                fprintf(f, " %lld", h[e][i]);\n'
     '            fprintf(f, "\\n");\n        }\n        fclose(f);\n    }\n'
     '    printf("%d of the GEMMs differ\\n", differ);'),
]


def edit(path, edits):
    text = open(path).read()
    for anchor, replacement, *count in edits:
        if text.count(anchor) != (count[0] if count else 1):
            sys.exit(f"coded_timeline: {os.path.basename(path)} has {text.count(anchor)} of {anchor.strip()!r} "
                     "(the kernel changed: update the anchors)")
        text = text.replace(anchor, replacement)
    open(path, "w").write(text)


def build(root, work, hip_include):
    for sub in ("kernels", "src/core"):
        shutil.copytree(os.path.join(root, sub), os.path.join(work, sub))
    os.makedirs(os.path.join(work, "tools/hopper_probes"))
    probe = os.path.join(work, "tools/hopper_probes/engine_gemm.cu")
    shutil.copy(os.path.join(root, "tools/hopper_probes/engine_gemm.cu"), probe)
    edit(os.path.join(work, "kernels/gemm_wgmma_coded.h"), KERNEL_EDITS)
    edit(probe, PROBE_EDITS)
    exe = os.path.join(work, "engine_gemm_timeline")
    nvcc = subprocess.run(["nvcc", "-x", "cu", "-std=c++17", "-O3", "-D__HIP_PLATFORM_NVIDIA__", "-isystem",
                           hip_include, "-gencode", "arch=compute_90a,code=sm_90a", "-fmad=false", "-o", exe, probe],
                          capture_output=True, text=True)
    if nvcc.returncode != 0:  # ptxas's notes on injected warpgroup arrives (C7519) left out
        sys.exit("".join(l for l in (nvcc.stdout + nvcc.stderr).splitlines(True) if "C7519" not in l))
    return exe


def summarize(path):
    lines = [l.split() for l in open(path)]
    col = {name: i for i, name in enumerate(lines[0])}
    rows = [[int(v) for v in l] for l in lines[1:]]
    traced = [r for r in rows if r[col["CW"]] > 0]
    if len(traced) < 3:
        sys.exit(f"coded_timeline: {path} holds {len(traced)} traced stages")

    def gaps(later, earlier, previous_stage=False):
        out = []
        for s in range(1, len(traced)):
            a = traced[s][col[later]]
            b = traced[s - 1 if previous_stage else s][col[earlier]]
            if a > 0 and b > 0:
                out.append(a - b)
        return statistics.median(out)

    print(f"{len(traced)} stages of block 0 (mlp1), median cycles:")
    parts = [("a stage (consumer to consumer)", "CW", "CW", True),
             ("consumer: slots released to rows in", "CX", "CW", True),
             ("consumer: rows in to decoded weights in", "CA", "CX", False),
             ("consumer: issue to the previous group done", "CW", "CA", False),
             ("decoder: stage decoded to next codes in", "DC", "DF", True),
             ("decoder: codes in to a free decoded slot", "DA", "DC", False),
             ("decoder: decoding a stage", "DF", "DA", False),
             ("rows' copy issued to consumer sees it", "CX", "XE", False)]
    for label, later, earlier, prev in parts:
        print(f"  {label:45s} {gaps(later, earlier, prev):8.0f}")
    epilogues = [r[col["EPE"]] - r[col["EPS"]] for r in rows if r[col["EPE"]] > 0]
    if epilogues:
        print(f"  {'an item epilogue':45s} {statistics.median(epilogues):8.0f} ({len(epilogues)} items)")


def main():
    p = argparse.ArgumentParser(description="the coded Hopper kernel's timeline (block 0, mlp1)")
    p.add_argument("--rows", type=int, default=2048)
    p.add_argument("--out", default="coded_timeline.txt", help="where the stamps go")
    p.add_argument("--hip-include", default="/tmp/gptoss-debroot/usr/include")
    p.add_argument("--summarize", metavar="TRACE", help="only summarize a trace written before")
    args = p.parse_args()
    if not args.summarize:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with tempfile.TemporaryDirectory() as work:
            exe = build(root, work, args.hip_include)
            env = dict(os.environ, TIMELINE_OUT=os.path.abspath(args.out))
            subprocess.run([exe, "--weights", "mxfp4", "--experts-only", str(args.rows)], env=env, check=True)
    summarize(args.summarize or args.out)


if __name__ == "__main__":
    main()
