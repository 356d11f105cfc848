"""doctor(): variant, versions, device and a self-test of every public op."""

import importlib.util
import json

import pytest
import torch

from .util import BACKEND, REPO, kernel

pytestmark = pytest.mark.kernels_ci

OPS = {"rmsnorm", "gelu", "gelu_tanh", "geglu", "gelu_and_mul", "gelu_tanh_and_mul", "rope_interleaved",
       "rope_interleaved_qk", "rope_rotate_half", "rope_rotate_half_single", "adaln", "gated_residual"}


def test_doctor_summary(capsys):
    info = kernel.doctor()
    printed = capsys.readouterr().out
    assert info["variant"]["id"] == kernel.__name__
    assert info["variant"]["backend"] == BACKEND
    assert info["torch"]["version"] == torch.__version__
    assert info["device"]["type"] == ("cuda" if BACKEND == "cuda" and torch.cuda.is_available() else "cpu")
    tested = {r["op"].split("(")[0] for r in info["results"]}
    assert OPS <= tested, f"doctor does not self-test {OPS - tested}"
    bad = [r for r in info["results"] if not r["passed"]]
    assert not bad and info["ok"] and info["failed"] == 0, bad
    assert all(r["max_abs_err"] is not None for r in info["results"])
    for text in (kernel.__name__, torch.__version__, "PASS  rmsnorm", f"{info['passed']}/{len(info['results'])} passed"):
        assert text in printed


def test_doctor_reports_a_failing_op_without_raising(monkeypatch):
    def broken(x, *a, **kw):
        raise RuntimeError("boom")

    monkeypatch.setattr(kernel, "gelu_tanh", broken)
    info = kernel.doctor(verbose=False, kernel=kernel)
    recs = [r for r in info["results"] if r["op"] == "gelu_tanh"]
    assert recs and all(not r["passed"] and "boom" in r["error"] for r in recs)
    assert not info["ok"] and info["failed"] == len(recs)


def test_tools_doctor_script(capsys):
    spec = importlib.util.spec_from_file_location("ltx_tools_doctor", REPO / "tools" / "doctor.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--json"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("\n{") + 1:])
    assert summary["ok"] and summary["variant"]["id"] == kernel.__name__
