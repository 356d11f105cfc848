"""The benchmark scripts cannot rot: bench_ops.py --smoke runs end to end on the loaded
variant (tiny shapes, no peers), and every benchmarks/benchmark.py workload passes the
check `kernels benchmark` applies (allclose, atol=1e-2), without the CLI's extra deps."""

import importlib.util
import json
import sys

import pytest
import torch

from .util import BACKEND, REPO, kernel

pytestmark = pytest.mark.kernels_ci


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_bench_ops_smoke(tmp_path):
    bench = _load("ltx_bench_ops", REPO / "benchmarks" / "bench_ops.py")
    device = "cuda" if BACKEND == "cuda" and torch.cuda.is_available() else "cpu"
    rc = bench.main(["--smoke", "--device", device, "--out", str(tmp_path), "--no-results",
                     "--dtype", "bf16,fp32"])
    data = json.loads((tmp_path / "results.json").read_text())
    ops = {s["op"] for s in data["summaries"]}
    assert ops == set(bench.OPS), ops
    bad = [(s["op"], s["shape"], s["dtype"], s["ours_status"]) for s in data["summaries"] if s["ours_status"] != "ok"]
    assert not bad, bad
    assert rc == 0
    for r in data["rows"]:  # every timed row has the derived columns
        if r.get("status") == "ok":
            assert r["us"] > 0 and r["gbps"] > 0 and r["bytes"] > 0, r
    section = (tmp_path / "results.md").read_text()
    assert "### Summary" in section and "rope_llama" in section
    # the same-bytes copy: timed in every case, a reference row, never the best peer
    for s in data["summaries"]:
        assert s["copy_same_us"] and s["copy_same_us"] > 0, s
        assert s["best_peer"] != bench.SAME_BYTES_COPY, s
    refs = [r for r in data["rows"] if r["impl"] == bench.SAME_BYTES_COPY]
    assert len(refs) == len(data["summaries"]) and all(r["status"] == "ref" for r in refs)


def test_bench_ops_bytes_model():
    bench = _load("ltx_bench_ops", REPO / "benchmarks" / "bench_ops.py")
    case = bench.rope_ltx_case((2, 8, 64), torch.bfloat16, "cpu", qk=True)
    inp = case.inputs()
    counted = bench.nbytes_of([inp[n] for n in case.counted])
    # q, k bf16 + fp32 cos, sin, each once
    assert counted == 2 * (2 * 8 * 64 * 2) + 2 * (2 * 8 * 64 * 4)


def test_kernels_benchmark_workloads():
    mod = _load("benchmark_module", REPO / "benchmarks" / "benchmark.py")
    from kernels.benchmark import Benchmark

    classes = [c for c in vars(mod).values()
               if isinstance(c, type) and issubclass(c, Benchmark) and c is not Benchmark
               and c.__module__ == "benchmark_module"]
    assert len(classes) >= 4
    device = "cuda" if BACKEND == "cuda" and torch.cuda.is_available() else "cpu"
    ran = 0
    for cls in classes:
        for name in [n for n in dir(cls) if n.startswith("benchmark_")]:
            w = name.removeprefix("benchmark_")
            inst = cls()
            inst.kernel, inst.device = kernel, device
            torch.manual_seed(cls.seed or 0)
            getattr(inst, f"setup_{w}", inst.setup)()
            getattr(inst, name)()
            ref = getattr(inst, f"verify_{w}")()
            assert inst.out is not None, f"{cls.__name__}.{w} wrote no self.out"
            assert torch.allclose(inst.out, ref, atol=1e-2), f"{cls.__name__}.{w}: verification would fail"
            ran += 1
    assert ran >= 10


def test_median_runs_merges_smoke_runs(tmp_path):
    """benchmarks/median_runs.py: medians of several bench_ops.py runs, summaries recomputed,
    each row's per-run times kept; a case missing from a run is dropped and listed."""
    bench = _load("ltx_bench_ops", REPO / "benchmarks" / "bench_ops.py")
    med = _load("ltx_median_runs", REPO / "benchmarks" / "median_runs.py")
    device = "cuda" if BACKEND == "cuda" and torch.cuda.is_available() else "cpu"
    for i, ops in enumerate(("rmsnorm,gelu_tanh", "rmsnorm,gelu_tanh", "rmsnorm")):
        assert bench.main(["--smoke", "--device", device, "--out", str(tmp_path / f"run{i}"), "--no-results",
                           "--ops", ops]) == 0
    runs = [str(tmp_path / f"run{i}" / "results.json") for i in range(3)]
    assert med.main(runs + ["--out", str(tmp_path / "med"), "--no-results"]) == 0
    data = json.loads((tmp_path / "med" / "results.json").read_text())
    assert {s["op"] for s in data["summaries"]} == {"rmsnorm"}
    assert data["skipped"] and all(s.startswith("gelu_tanh") for s in data["skipped"])
    ours = [r for r in data["rows"] if r["impl"] == "ours"]
    assert ours and all(r["status"] == "ok" and r["note"].count(",") == 2 for r in ours), ours
    first = json.loads((tmp_path / "run0" / "results.json").read_text())
    r0 = next(r for r in first["rows"] if r["impl"] == "ours")
    m0 = next(r for r in ours if r["shape"] == r0["shape"] and r["dtype"] == r0["dtype"])
    per_run = [json.loads(open(p).read()) for p in runs]
    times = sorted(next(r["us"] for r in run["rows"] if r["impl"] == "ours" and r["shape"] == r0["shape"]
                        and r["dtype"] == r0["dtype"]) for run in per_run)
    assert m0["us"] == times[1]
    assert "median of 3 runs" in (tmp_path / "med" / "results.md").read_text()
    # the same-bytes copy stays a reference through the medians (never "ok", never a peer)
    refs = [r for r in data["rows"] if r["impl"] == bench.SAME_BYTES_COPY]
    assert refs and all(r["status"] == "ref" for r in refs)
    assert all(s["best_peer"] != bench.SAME_BYTES_COPY and s["copy_same_us"] for s in data["summaries"])


def test_host_overhead_script_runs(capsys):
    """benchmarks/host_overhead.py cannot rot: a few calls of every op on the loaded variant."""
    ho = _load("ltx_host_overhead", REPO / "benchmarks" / "host_overhead.py")
    device = "cuda" if BACKEND == "cuda" and torch.cuda.is_available() else "cpu"
    assert ho.main(["--device", device, "--calls", "20", "--rounds", "1"]) == 0
    table = capsys.readouterr().out
    for op in ("rmsnorm", "gelu_tanh", "geglu", "rope_interleaved", "rope_rotate_half", "adaln",
               "gated_residual", "rmsnorm_rope_qk"):
        assert f"| {op} |" in table, table
