"""Throughput and peak memory of `tilefit diagnose` on a large generated server log.

Writes a log of --size MB to a temporary file (never into the repo), then runs
`tilefit diagnose --json` on it in a fresh process, --runs times, and reports wall time, MB/s and
the child's peak RSS. The injected counts are checked against the diagnosis, so a fast but wrong
parser fails the benchmark. Two kinds of log (--log):
- sparse: an sglang/vLLM-style mix of steady serving lines with, every --incident-every lines, a
  FlashInfer tactic failure and its backtrace, a CUDA-graph capture progress line, and a Triton
  OutOfResources in a sweep that goes on;
- dense: what an SM120 warmup looks like: 160 FlashInfer tactic failures, each with an 8-frame
  TensorRT-LLM backtrace, per 3,000 lines (about half the lines belong to a failure).
Both end with the server's ready line.

    python benchmarks/bench_diagnose.py --log dense --size 1024 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

BLOCK_LINES = 8192
VARIANTS = 61  # distinct blocks, written cyclically (a prime: no alignment with anything)

STEADY = (
    "[2025-10-06 20:{m:02d}:{s:02d} DP0 TP{r}] Decode batch. #running-req: {a}, #token: {b}, token usage: "
    "0.{c:02d}, cuda graph: True, gen throughput (token/s): {d}.{e}, #queue-req: 0, ",
    "[2025-10-06 20:{m:02d}:{s:02d}] INFO:     127.0.0.1:{p} - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
    "(EngineCore_DP0 pid=4123) INFO 10-06 20:{m:02d}:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: "
    "{d}.{e} tokens/s, Avg generation throughput: {a}.{c} tokens/s, Running: {a} reqs, Waiting: 0 reqs, GPU KV "
    "cache usage: {c}.{e}%, Prefix cache hit rate: {c}.{r}%",
    "[2025-10-06 20:{m:02d}:{s:02d} DP0 TP{r}] Prefill batch. #new-seq: {r}, #new-token: {b}, #cached-token: {a}, "
    "token usage: 0.{c:02d}, #running-req: {a}, #queue-req: 0, ",
)
SKIP = ("2025-10-06 20:{m:02d}:{s:02d},{ms:03d} - WARNING - autotuner.py:484 - flashinfer.jit: [Autotuner]: "
        "Skipping tactic <flashinfer.fused_moe.core.get_cutlass_fused_moe_module.<locals>.MoERunner object at "
        "0x7f2c5d1e3a90> {t}, due to failure while profiling: [TensorRT-LLM][ERROR] Assertion failed: Failed to "
        "initialize cutlass TMA WS grouped gemm. Error: Error Internal (/flashinfer/data/csrc/nv_internal/"
        "tensorrt_llm/kernels/cutlass_kernels/moe_gemm/launchers/moe_gemm_tma_ws_launcher.inl:1093)")
BACKTRACE = (
    "1       0x7f3c2a1b4c2e tensorrt_llm::common::throwRuntimeError(char const*, int, char const*) + 78",
    "2       0x7f3c2a6f1e9d void tensorrt_llm::kernels::cutlass_kernels_oss::tma_warp_specialized_generic_moe_"
    "gemm_kernelLauncher<cutlass::arch::Sm120, __nv_fp4_e2m1, __nv_fp4_e2m1, __nv_bfloat16, tensorrt_llm::"
    "cutlass_extensions::EpilogueOpDefault, (tensorrt_llm::TmaWarpSpecializedGroupedGemmInput::EpilogueFusion)1"
    ", cute::tuple<cute::C<128>, cute::C<256>, cute::C<128> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >"
    ", false, false, false, false>(...) + 1645",
)
CAPTURE = "Capturing batches (bs={bs} avail_mem=8.90 GB):  50%|#####     | 5/11 [00:10<00:12,  2.21s/it]"
OOR = ("config {{'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 256, 'BLOCK_SIZE_K': 128, 'num_stages': 5}} skipped: out of "
       "resource: shared memory, Required: 245760, Hardware limit: 232448. Reducing block sizes or `num_stages` "
       "may help.")
TUNE = "Mon Oct  6 20:24:05 2025] Completed tuning for batch_size={bs}"
READY = "[2025-10-06 23:59:59] The server is fired up and ready to roll!"

# The dense log: per DENSE_LINES lines, DENSE_FAILURES tactic failures with DENSE_FRAMES frames each.
DENSE_LINES, DENSE_FAILURES = 3000, 160
DENSE_TILES = ("128, 128, 128", "128, 256, 128", "256, 128, 128", "128, 64, 128", "128, 32, 128")
DENSE_FRAMES = (
    "1       0x7f3c2a1b{a:04x} tensorrt_llm::common::throwRuntimeError(char const*, int, char const*) + 78",
    "2       0x7f3c2a6f{a:04x} void tensorrt_llm::kernels::cutlass_kernels_oss::tma_warp_specialized_generic_"
    "moe_gemm_kernelLauncher<cutlass::arch::Sm120, __nv_fp4_e2m1, __nv_fp4_e2m1, __nv_bfloat16, tensorrt_llm::"
    "cutlass_extensions::EpilogueOpDefault, (tensorrt_llm::TmaWarpSpecializedGroupedGemmInput::EpilogueFusion)"
    "{fusion}, cute::tuple<cute::C<{m}>, cute::C<{n}>, cute::C<{k}> >, cute::tuple<cute::C<1>, cute::C<1>, "
    "cute::C<1> >, false, false, false, false>(...) + 1645",
    "3       0x7f3c2a6c{a:04x} void tensorrt_llm::kernels::cutlass_kernels_oss::dispatchMoeGemmSelectClusterShape"
    "TmaWarpSpecialized<cutlass::arch::Sm120, __nv_fp4_e2m1, __nv_fp4_e2m1, __nv_bfloat16, tensorrt_llm::"
    "cutlass_extensions::EpilogueOpDefault, (tensorrt_llm::TmaWarpSpecializedGroupedGemmInput::EpilogueFusion)"
    "{fusion}, cute::tuple<cute::C<{m}>, cute::C<{n}>, cute::C<{k}> > >(...) + 285",
    "4       0x7f3c2a6d{a:04x} tensorrt_llm::kernels::cutlass_kernels::MoeGemmRunner<__nv_fp4_e2m1, __nv_fp4_e2m1, "
    "__nv_bfloat16, __nv_fp4_e2m1, __nv_bfloat16, void>::moeGemm(...) + 77",
    "5       0x7f3c2a58{a:04x} tensorrt_llm::kernels::cutlass_kernels::CutlassMoeFCRunner<__nv_fp4_e2m1, "
    "__nv_fp4_e2m1, __nv_bfloat16, __nv_fp4_e2m1, __nv_bfloat16, void>::gemm2(...) + 461",
    "6       0x7f3c2a41{a:04x} FusedMoeRunner::runGemmProfile(at::Tensor const&, long, long, bool) + 1337",
    "7       0x7f3d9c0e{a:04x} /usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_python.so(+0x9c0e21) "
    "[0x7f3d9c0e{a:04x}]",
    "8       0x7f3e11a2{a:04x} /usr/bin/python3(_PyObject_MakeTpCall+0x2a0) [0x55d0c1a2{a:04x}]",
)


def dense_block(variant: int) -> tuple[bytes, dict[str, int]]:
    lines: list[str] = []
    per = DENSE_LINES // DENSE_FAILURES  # 18: one failure (9 lines) and 9 steady lines
    failures = 0
    n0 = variant * DENSE_LINES
    while len(lines) < DENSE_LINES:
        n = n0 + len(lines)
        if failures < DENSE_FAILURES and len(lines) % per == 0:
            m, nn, k = DENSE_TILES[n % len(DENSE_TILES)].split(", ")
            lines.append(SKIP.format(m=n % 60, s=(n // 60) % 60, ms=n % 1000, t=n % 40))
            lines.extend(f.format(a=n % 65536, fusion=3 if n % 2 else 0, m=m, n=nn, k=k) for f in DENSE_FRAMES)
            failures += 1
        else:
            lines.append(STEADY[n % len(STEADY)].format(
                m=n % 60, s=(n // 7) % 60, r=n % 8, a=n % 97, b=(n * 7919) % 100000, c=n % 100, d=n % 5000,
                e=n % 10, p=40000 + n % 9999))
    return ("\n".join(lines) + "\n").encode(), {"tactic-skipped": failures, "triton-out-of-resources": 0}


def block(variant: int, incident_every: int) -> tuple[bytes, dict[str, int]]:
    lines: list[str] = []
    counts = {"tactic-skipped": 0, "triton-out-of-resources": 0}
    i = 0
    while len(lines) < BLOCK_LINES:
        n = variant * BLOCK_LINES + i
        if i % incident_every == incident_every - 1:
            k = (n // incident_every) % 3
            if k == 0:
                lines.append(SKIP.format(m=n % 60, s=(n // 60) % 60, ms=n % 1000, t=20 + n % 40))
                lines.extend(BACKTRACE)
                counts["tactic-skipped"] += 1
            elif k == 1:
                lines.append(CAPTURE.format(bs=1 + n % 64))
            else:
                lines.append(OOR)
                lines.append(TUNE.format(bs=1 + n % 4096))
                counts["triton-out-of-resources"] += 1
        else:
            lines.append(STEADY[n % len(STEADY)].format(
                m=n % 60, s=(n // 7) % 60, r=n % 8, a=n % 97, b=(n * 7919) % 100000, c=n % 100, d=n % 5000,
                e=n % 10, p=40000 + n % 9999))
        i += 1
    return ("\n".join(lines) + "\n").encode(), counts


def generate(path: str, size_mb: int, incident_every: int, kind: str = "sparse") -> dict[str, int]:
    blocks = [dense_block(v) if kind == "dense" else block(v, incident_every) for v in range(VARIANTS)]
    total = {"tactic-skipped": 0, "triton-out-of-resources": 0, "lines": 0}
    target = size_mb * 2**20
    written = 0
    with open(path, "wb") as f:
        v = 0
        while written < target:
            data, counts = blocks[v % VARIANTS]
            f.write(data)
            written += len(data)
            total["lines"] += data.count(b"\n")
            for k, c in counts.items():
                total[k] += c
            v += 1
        f.write(READY.encode() + b"\n")
        total["lines"] += 1
    return total


def _status_kb(pid: int, path: str, key: str) -> int:
    try:
        with open(f"/proc/{pid}/{path}") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of a process and its children (the parallel reader's workers), from /proc. RSS
    counts the pages a forked worker shares with its parent once per process; PSS splits them."""
    rss, pss = _status_kb(pid, "status", "VmRSS:"), _status_kb(pid, "smaps_rollup", "Pss:")
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except OSError:
        kids = []
    for k in kids:
        r, p = _tree_kb(k)
        rss, pss = rss + r, pss + p
    return rss, pss


def run_once(path: str, jobs: int | None) -> tuple[float, float, float, float, float, dict]:
    """Wall time, CPU seconds (the process and its workers), peak RSS of the diagnose process
    (wait4), peak RSS and PSS of its whole process tree (sampled every 20 ms; 0 where /proc is
    missing), and the JSON diagnosis."""
    import resource
    import threading

    out = tempfile.TemporaryFile()
    cmd = [sys.executable, "-m", "tilefit.cli.main", "diagnose", path, "--json"]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE)
    peak = [0, 0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            rss, pss = _tree_kb(p.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    done.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # workers are reaped by the child first
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode not in (0, 1, 3):
        raise SystemExit(f"diagnose failed ({p.returncode}): {p.stderr.read().decode() if p.stderr else ''}")
    out.seek(0)
    return wall, cpu, usage.ru_maxrss / 1024, peak[0] / 1024, peak[1] / 1024, json.loads(out.read())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024, help="log size in MB (default 1024)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--log", choices=("sparse", "dense"), default="sparse",
                    help="sparse: one incident per --incident-every lines; dense: 160 tactic failures with "
                         "backtraces per 3,000 lines (an SM120 warmup)")
    ap.add_argument("--incident-every", type=int, default=200, help="sparse log: one incident per this many lines")
    ap.add_argument("--jobs", type=int, action="append",
                    help="reader processes (repeatable; default: the CLI's default, then 1)")
    ap.add_argument("--keep", action="store_true", help="keep the generated log")
    args = ap.parse_args()
    fd, path = tempfile.mkstemp(prefix="tilefit-bench-", suffix=".log")
    os.close(fd)
    try:
        t = time.perf_counter()
        # Generate in a child, so this process stays small when it forks the measured one.
        from multiprocessing import get_context

        with get_context("spawn").Pool(1) as pool:
            expect = pool.apply(generate, (path, args.size, args.incident_every, args.log))
        size = os.path.getsize(path)
        print(f"generated {size / 2**20:,.0f} MB, {expect['lines']:,} lines in {time.perf_counter() - t:.1f} s: "
              f"{expect['tactic-skipped']:,} tactic failures, {expect['triton-out-of-resources']:,} OutOfResources "
              + (f"({args.log} log: 160 failures per 3,000 lines)" if args.log == "dense"
                 else f"(sparse log: one incident per {args.incident_every} lines)"))
        for jobs in args.jobs or [0, 1]:
            if measure(path, size, expect, jobs, args.runs):
                return 1
    finally:
        if not args.keep:
            os.unlink(path)
    return 0


def _default_readers() -> str:
    """How many readers the CLI starts by default here (what the measured process imports)."""
    try:
        from tilefit.diagnose.parallel import default_workers
    except ImportError:
        return "?"
    return str(default_workers())


def measure(path: str, size: int, expect: dict[str, int], jobs: int, runs: int) -> int:
    """Run diagnose `runs` times with `jobs` reader processes (0: the CLI default); 1 on a wrong result."""
    label = f"--jobs {jobs}" if jobs else f"default --jobs ({_default_readers()} readers)"
    walls = []
    for i in range(runs):
        wall, cpu, peak_mb, tree_mb, pss_mb, d = run_once(path, jobs)
        got = {f["kind"]: f["count"] for f in d["failures"]}
        ok = (d["verdict"] == "recovered" and d["lines"] == expect["lines"]
              and got.get("tactic-skipped", 0) == expect["tactic-skipped"]
              and got.get("triton-out-of-resources", 0) == expect["triton-out-of-resources"])
        if not ok:
            print(f"WRONG RESULT: expected {expect}, got verdict {d['verdict']}, lines {d['lines']}, {got}")
            return 1
        walls.append(wall)
        print(f"{label} run {i + 1}: {wall:.2f} s, {size / 2**20 / wall:,.0f} MB/s ({cpu:.2f} CPU-s, "
              f"{size / 2**20 / cpu:,.0f} MB per CPU-second), peak RSS {peak_mb:,.1f} MB (process tree: RSS "
              f"{tree_mb:,.1f} MB, PSS {pss_mb:,.1f} MB; verdict {d['verdict']}, counts match)")
    if walls:
        best = min(walls)
        print(f"{label}: best {best:.2f} s = {size / 2**20 / best:,.0f} MB/s; median "
              f"{sorted(walls)[len(walls) // 2]:.2f} s; goal >= 200 MB/s and < 100 MB peak")
    return 0


if __name__ == "__main__":
    sys.exit(main())
