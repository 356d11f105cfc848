"""The end-to-end benchmarks cannot rot: benchmarks/ltx_video.py, benchmarks/llama.py and
benchmarks/finetune.py run in --tiny mode in-process on the CPU (baseline + kernels), the kernels
really replace modules, and each script's own match check passes."""

import importlib.util
import sys

import pytest

from .util import HAS_GPU, REPO

pytestmark = pytest.mark.kernels_ci


def _load(name):
    spec = importlib.util.spec_from_file_location(f"ltx_e2e_{name}", REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_ltx_video_tiny_cpu(tmp_path):
    pytest.importorskip("diffusers", reason="benchmarks/ltx_video.py needs diffusers")
    bench = _load("ltx_video")
    data = bench.main(["--tiny", "--device", "cuda" if HAS_GPU else "cpu", "--configs", "baseline,kernels", "--steps", "2",
                       "--warmup-iterations", "1", "--warmup-steps", "2", "--quiet", "--no-results",
                       "--out", str(tmp_path)])
    res = data["results"]
    assert list(res) == ["baseline", "kernels"]
    assert res["kernels"]["patched"]["adaln"] == 4 and res["kernels"]["patched"]["rmsnorm_rope_qk"] == 4
    assert res["baseline"]["match"]["noise"] > 0  # the fp32 noise run really ran and differs
    assert res["kernels"]["match"]["pass"], res["kernels"]["match"]
    assert res["kernels"]["match"]["cos"] >= 0.9999
    assert len(res["kernels"]["step_ms"]) == 2 and res["kernels"]["wall_ms"] > 0
    assert data["pass"] and (tmp_path / "ltx_video_results.json").exists()


def test_llama_tiny_cpu(tmp_path):
    pytest.importorskip("transformers", reason="benchmarks/llama.py needs transformers")
    bench = _load("llama")
    # kernelize's LocalLayerRepository loads torch's own backend: CUDA on a GPU machine
    data = bench.main(["--tiny", "--device", "cuda" if HAS_GPU else "cpu", "--configs", "baseline,kernels",
                       "--decode-tokens", "4", "--warmup-decode", "1", "--no-results", "--out", str(tmp_path)])
    res = data["results"]
    assert res["kernels"]["kernelized"] == {"RMSNorm": 5}, res["kernels"]["kernelized"]
    assert res["baseline"]["match"]["noise"] > 0
    assert res["kernels"]["match"]["pass"], res["kernels"]["match"]
    assert data["pass"] and res["kernels"]["decode_ms"] > 0
    assert res["kernels"]["prefill_ms"] > 0


def test_finetune_tiny_cpu(tmp_path):
    pytest.importorskip("diffusers", reason="benchmarks/finetune.py needs diffusers")
    bench = _load("finetune")
    data = bench.main(["--tiny", "--device", "cuda" if HAS_GPU else "cpu", "--configs", "baseline,kernels", "--steps", "6",
                       "--warmup", "1", "--no-results", "--out", str(tmp_path)])
    res = data["results"]
    assert list(res) == ["baseline", "kernels"]
    assert data["noise"] is not None and data["noise"] >= 0
    assert res["kernels"]["pass_"], res["kernels"]
    assert data["pass"]
