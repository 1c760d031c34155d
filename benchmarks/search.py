"""Benchmark: exact top-k search and the streamed log-partition at 1,000,000 x 128.

1. Exact top-10 for Q queries over N corpus vectors (unit norm, so inner product = cosine):
   a direct ``faiss.IndexFlatIP.search`` call, ``contrastlab.search.EmbeddingIndex`` (metric "ip", and
   "cosine", which normalises the queries first), and a blocked torch matmul + topk baseline.
2. The streamed log-partition ``log Σ_i exp(⟨q, ξ_i⟩/τ)`` for ``--lse-queries`` queries over the same
   corpus, each run in its own child process whose peak RSS is read with ``os.wait4`` (getrusage of that
   child): a floor (imports + queries only), the corpus streamed from an ``.npy`` file (``NpyBlocks``), and
   the corpus loaded in memory. The result is compared with ``torch.logsumexp`` of the full logit rows
   (computed in chunks of queries, float32 and float64), and the top-k bound of
   ``topk_log_partition`` is checked against it.

Usage:
    OMP_NUM_THREADS=2 python benchmarks/search.py            # the full run (about 2 GB of RAM, minutes)
    python benchmarks/search.py --n 20000 --queries 500 --lse-queries 100   # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _threads  # first: pins the BLAS threads before numpy and torch load
import faiss
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from contrastlab.search import EmbeddingIndex, log_partition, topk_log_partition  # noqa: E402

CHILD = r"""
import json, os, sys, time
import numpy as np, torch
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
from contrastlab.search import NpyBlocks, log_partition
mode, corpus_path, queries_path, out_path, tau, block = sys.argv[1:7]
q = torch.from_numpy(np.load(queries_path))
t0 = time.perf_counter()
if mode == "floor":
    lz = None
elif mode == "stream":
    lz = log_partition(q, NpyBlocks(corpus_path, int(block)), temperature=float(tau))
else:
    corpus = np.load(corpus_path)
    lz = log_partition(q, corpus, temperature=float(tau))
seconds = time.perf_counter() - t0
if lz is not None:
    np.save(out_path, lz.numpy())
hwm = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
print(json.dumps({"seconds": seconds, "vm_hwm_mib": hwm / 1024}))
"""


def timed(fn, repeats: int):
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def torch_topk(xq: torch.Tensor, xb: torch.Tensor, k: int, q_block: int = 2048, c_block: int = 65536):
    """Exact top-k by blocked matmul: (q_block, c_block) score tiles, running top-k merged per tile."""
    vals = torch.empty(xq.shape[0], k)
    idx = torch.empty(xq.shape[0], k, dtype=torch.int64)
    for s in range(0, xq.shape[0], q_block):
        q = xq[s : s + q_block]
        best_v = torch.full((q.shape[0], k), -float("inf"))
        best_i = torch.zeros((q.shape[0], k), dtype=torch.int64)
        for c in range(0, xb.shape[0], c_block):
            scores = q @ xb[c : c + c_block].T  # (q_block, c_block)
            v, i = scores.topk(min(k, scores.shape[1]), dim=1)
            cat_v, cat_i = torch.cat([best_v, v], 1), torch.cat([best_i, i + c], 1)
            best_v, sel = cat_v.topk(k, dim=1)
            best_i = cat_i.gather(1, sel)
        vals[s : s + q_block], idx[s : s + q_block] = best_v, best_i
    return vals, idx


LAUNCHER = r"""
import json, os, subprocess, sys
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
out = proc.stdout.read()
_, status, usage = os.wait4(proc.pid, 0)
code = os.waitstatus_to_exitcode(status)
print(json.dumps({"code": code, "max_rss_kib": usage.ru_maxrss, "stdout": out.decode()}))
"""


def run_child(mode: str, corpus_path: Path, queries_path: Path, out_path: Path, tau: float, block: int) -> dict:
    """Run one log-partition child and read its peak RSS with ``os.wait4`` (getrusage of that child).

    A forked child inherits its parent's RSS high-water mark across ``exec`` (Linux keeps ``maxrss`` as the
    max over the old and new address spaces), so the child is started by a small launcher process rather
    than by this one, which holds the corpus: the launcher's own mark is small, and so is the child's floor.
    """
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    child = [sys.executable, "-c", CHILD, mode, str(corpus_path), str(queries_path), str(out_path), str(tau)]
    res = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *child, str(block)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    outer = json.loads(res.stdout.strip().splitlines()[-1])
    if outer["code"] != 0:
        raise RuntimeError(f"child {mode} failed with exit code {outer['code']}")
    info = json.loads(outer["stdout"].strip().splitlines()[-1])
    info["max_rss_mib"] = outer["max_rss_kib"] / 1024  # ru_maxrss is in KiB on Linux
    return info


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1_000_000, help="corpus size N")
    p.add_argument("--d", type=int, default=128, help="dimension D")
    p.add_argument("--queries", type=int, default=10_000, help="queries for the top-k benchmark")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--lse-queries", type=int, default=1000, help="queries for the log-partition benchmark")
    p.add_argument("--tau", type=float, default=0.05, help="temperature of the softmax search")
    p.add_argument("--block", type=int, default=16384, help="corpus rows per block read from the .npy file")
    p.add_argument("--threads", type=int, default=_threads.THREADS)
    p.add_argument("--repeats", type=int, default=1, help="passes over the queries (times are averaged)")
    p.add_argument("--chunk", type=int, default=1000, help="queries per turn in the interleaved top-k timing")
    p.add_argument("--cosine", action="store_true", help="also time metric='cosine' (normalises the queries)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the measurements here")
    a = p.parse_args()
    faiss.omp_set_num_threads(a.threads)
    torch.set_num_threads(a.threads)
    rows: dict[str, object] = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs, "
        f"{a.threads} threads, Python {platform.python_version()}, torch {torch.__version__}, "
        f"faiss {faiss.__version__}, numpy {np.__version__}",
        "args": vars(a),
    }

    # TRY NOT TO MODIFY: seeded data (unit vectors; inner product = cosine)
    rng = np.random.default_rng(a.seed)
    xb = rng.standard_normal((a.n, a.d), dtype=np.float32)
    xb /= np.linalg.norm(xb, axis=1, keepdims=True)
    xq = rng.standard_normal((a.queries, a.d), dtype=np.float32)
    xq /= np.linalg.norm(xq, axis=1, keepdims=True)

    # ---------------------------------------------------------------- 1. exact top-k
    # The methods take turns on the same chunk of queries (faiss, contrastlab, torch, then the next chunk),
    # so that a change in machine load during the run hits all of them alike; the times are summed.
    print(f"top-{a.k}: {a.queries} queries over {a.n} x {a.d}, {a.threads} threads", flush=True)
    fx = faiss.IndexFlatIP(a.d)
    fx.add(xb)
    ours = {m: EmbeddingIndex(a.d, metric=m) for m in (("ip", "cosine") if a.cosine else ("ip",))}
    for index in ours.values():
        index.add(xb)
    tb = torch.from_numpy(xb)
    methods = {
        "faiss": lambda q: fx.search(q, a.k)[1],
        **{f"contrastlab_{m}": (lambda q, ix=ix: ix.search(q, a.k).positions) for m, ix in ours.items()},
        "torch": lambda q: torch_topk(torch.from_numpy(q), tb, a.k)[1].numpy(),
    }
    seconds = dict.fromkeys(methods, 0.0)
    found = {m: [] for m in methods}
    for _ in range(a.repeats):
        for m in methods:
            found[m] = []
        for s in range(0, a.queries, a.chunk):
            for m, fn in methods.items():
                t0 = time.perf_counter()
                found[m].append(fn(xq[s : s + a.chunk]))
                seconds[m] += time.perf_counter() - t0
            print(
                f"  {min(s + a.chunk, a.queries)}/{a.queries} queries: "
                + ", ".join(f"{m} {t:.1f} s" for m, t in seconds.items()),
                flush=True,
            )
    ids = {m: np.concatenate(v) for m, v in found.items()}
    topk: dict[str, float] = {"chunk": a.chunk, "repeats": a.repeats}
    for m in methods:
        topk[f"{m}_s"] = seconds[m] / a.repeats
        topk[f"{m}_ratio"] = seconds[m] / seconds["faiss"]
        topk[f"{m}_same_ids"] = float((ids[m] == ids["faiss"]).mean())
        print(
            f"  {m:20s} {topk[f'{m}_s']:9.2f} s  ratio to faiss {topk[f'{m}_ratio']:.3f}  "
            f"same ids as faiss {topk[f'{m}_same_ids']:.5f}"
        )
    rows["topk"] = topk
    fx.reset()
    del ours, methods

    # ---------------------------------------------------------------- 2. streamed log-partition
    nq = a.lse_queries
    q_lse = xq[:nq]
    print(f"log-partition: {nq} queries over {a.n} x {a.d}, tau = {a.tau}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        corpus_path, queries_path = Path(tmp) / "corpus.npy", Path(tmp) / "queries.npy"
        np.save(corpus_path, xb)
        np.save(queries_path, q_lse)
        children = {}
        for mode in ("floor", "stream", "memory"):
            out_path = Path(tmp) / f"lz_{mode}.npy"
            children[mode] = run_child(mode, corpus_path, queries_path, out_path, a.tau, a.block)
            if mode != "floor":
                children[mode]["lz"] = np.load(out_path)
            print(
                f"  child {mode:7s} {children[mode]['seconds']:7.2f} s  "
                f"peak RSS {children[mode]['max_rss_mib']:8.1f} MiB"
            )

    # reference: torch.logsumexp over full rows, chunks of queries (float32 as a user would, and float64)
    chunk = max(1, (1 << 26) // a.n)  # 256 MiB of float32 logits per chunk
    qt = torch.from_numpy(q_lse)
    ref32 = torch.cat([torch.logsumexp(qt[s : s + chunk] @ tb.T / a.tau, 1) for s in range(0, nq, chunk)]).double()
    n64 = min(nq, 50)
    tb64 = tb.double()
    ref64 = torch.cat(
        [torch.logsumexp(qt[s : min(s + chunk, n64)].double() @ tb64.T / a.tau, 1) for s in range(0, n64, chunk)]
    )
    del tb64
    t_in_proc, lz_in_proc = timed(lambda: log_partition(qt, xb, temperature=a.tau), 1)

    def rel(x: np.ndarray | torch.Tensor, ref: torch.Tensor) -> float:
        x = torch.as_tensor(x, dtype=torch.float64)[: ref.shape[0]]
        return float(((x - ref).abs() / ref.abs()).max())

    lse = {
        "tau": a.tau,
        "floor_rss_mib": children["floor"]["max_rss_mib"],
        "stream_rss_mib": children["stream"]["max_rss_mib"],
        "stream_vm_hwm_mib": children["stream"]["vm_hwm_mib"],
        "stream_s": children["stream"]["seconds"],
        "memory_rss_mib": children["memory"]["max_rss_mib"],
        "memory_s": children["memory"]["seconds"],
        "in_process_s": t_in_proc,
        "stream_max_rel_err_vs_float32_logsumexp": rel(children["stream"]["lz"], ref32),
        "memory_max_rel_err_vs_float32_logsumexp": rel(children["memory"]["lz"], ref32),
        "stream_max_rel_err_vs_float64_logsumexp": rel(children["stream"]["lz"], ref64),
        "float32_logsumexp_max_rel_err_vs_float64": rel(ref32, ref64),
        "float64_reference_queries": n64,
    }
    print(
        f"  max rel err vs torch.logsumexp: float32 {lse['stream_max_rel_err_vs_float32_logsumexp']:.2e}, "
        f"float64 {lse['stream_max_rel_err_vs_float64_logsumexp']:.2e} "
        f"(torch float32 itself vs float64: {lse['float32_logsumexp_max_rel_err_vs_float64']:.2e})"
    )

    # the approximate mode: top-k bounds against the exact value
    index = EmbeddingIndex(a.d, metric="ip")
    index.add(xb)
    exact = lz_in_proc
    for k in (10, 1000):
        t_k, b = timed(lambda k=k: topk_log_partition(index, q_lse, k, temperature=a.tau), 1)
        below, above = exact - b.lower, b.upper - exact
        ok = bool((below >= -1e-6 * exact.abs()).all() and (above >= -1e-6 * exact.abs()).all())
        lse[f"top{k}_s"] = t_k
        lse[f"top{k}_mean_error_of_lower"] = float(below.mean())
        lse[f"top{k}_mean_bound_width"] = float(b.max_error.mean())
        lse[f"top{k}_bound_holds"] = ok
        print(
            f"  top-{k} estimate: exact - lower = {float(below.mean()):.3f} (mean), bound width "
            f"{float(b.max_error.mean()):.3f} (mean), bound holds: {ok}, {t_k:.2f} s"
        )
    rows["log_partition"] = lse
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
