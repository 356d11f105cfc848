"""The capability check at first CUDA use (torch-ext/ltx_kernels/_arch.py), and the
built .so's embedded SASS/PTX list against metadata.json."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from .util import BACKEND, HAS_GPU, kernel, requires_gpu

pytestmark = pytest.mark.kernels_ci

arch = kernel._arch
VARIANT = Path(kernel.__file__).parent
METADATA = json.loads((VARIANT / "metadata.json").read_text())

SHIPPED = ["10.0", "12.0+PTX", "7.5", "8.0", "8.6", "8.9", "9.0"]  # as metadata.json sorts them


@pytest.mark.parametrize("cap, ok", [
    ((7, 5), True), ((8, 0), True), ((8, 6), True),
    ((8, 7), True),    # Orin: 8.6 SASS runs on 8.7 (same major, higher minor)
    ((9, 0), True), ((10, 0), True), ((10, 3), True), ((12, 0), True), ((12, 1), True),
    ((11, 0), False),  # Thor: no 11.x SASS, and the PTX is 12.0 > 11.0
    ((13, 0), True),   # newer than everything: the 12.0 PTX is JIT-compiled
    ((7, 0), False), ((6, 1), False), ((7, 2), False),
])
def test_rule_on_the_shipped_list(cap, ok):
    assert arch.supports(SHIPPED, cap) is ok


@pytest.mark.parametrize("archs, cap, ok", [
    (["9.0"], (9, 0), True), (["9.0"], (10, 0), False), (["8.0"], (8, 9), True), (["8.6"], (8, 0), False),
    (["9.0+PTX"], (12, 0), True), (["9.0+PTX"], (8, 9), False),
    (["9.0a"], (9, 0), True), (["9.0a"], (9, 1), False), (["9.0a+PTX"], (10, 0), False),
    (["10.0f"], (10, 3), True), (["10.0f"], (12, 0), False),
    (["gfx90a"], (9, 0), True),            # no string parses: nothing can be decided
    (["gfx90a", "8.0"], (9, 0), False),    # unknown strings are ignored otherwise
    ([], (9, 0), True),
])
def test_rule_cases(archs, cap, ok):
    assert arch.supports(archs, cap) is ok


def test_rule_agrees_with_kernels_arch_validator():
    kernels_archs = pytest.importorskip("kernels.archs")
    strings = ["7.5", "8.0", "8.6", "8.9", "9.0", "9.0a", "10.0", "10.0f", "10.3a", "12.0",
               "12.0+PTX", "9.0+PTX", "8.0+PTX", "12.1a+PTX", "x.y", "sm_90"]
    caps = [(m, n) for m in range(6, 14) for n in range(0, 4)]
    for s in strings:
        for c in caps:
            assert arch.arch_supports(s, c) == kernels_archs._cuda_arch_supports(s, c), (s, c)
    for lst in (SHIPPED, ["9.0a"], ["x"], ["x", "9.0"], ["8.0", "10.0f"]):
        for c in caps:
            assert arch.supports(lst, c) == kernels_archs._supports_cuda_capability(lst, c), (lst, c)


@pytest.fixture
def fake_gpu(monkeypatch):
    """A CUDA variant with SHIPPED archs on a pretend device 0 of capability 11.0."""
    calls = []

    def capability(index=None):
        calls.append(index)
        return (11, 0)

    arch.reset_cache()
    monkeypatch.setattr(arch, "_variant", {"id": "_ltx_kernels_cuda_test", "backend": {"type": "cuda", "archs": SHIPPED}})
    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA Jetson Thor")
    monkeypatch.setattr(torch.version, "hip", None)
    yield calls
    arch.reset_cache()


def test_uncovered_gpu_raises_naming_capability_and_list(fake_gpu):
    with pytest.raises(RuntimeError) as e:
        arch._verify(0)
    msg = str(e.value)
    assert "capability 11.0" in msg and "sm_110" in msg and "Jetson Thor" in msg
    assert "7.5, 8.0, 8.6, 8.9, 9.0, 10.0, 12.0+PTX" in msg  # the built list, in capability order
    assert "_ltx_kernels_cuda_test" in msg
    with pytest.raises(RuntimeError, match="capability 11.0"):  # every call raises, from the cache
        arch._verify(0)
    assert fake_gpu == [0]


def test_covered_gpu_is_cached(fake_gpu, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: fake_gpu.append(index) or (9, 0))
    arch._verify(1)
    assert 1 in arch._ok and fake_gpu == [1]


def test_no_archs_no_check(fake_gpu, monkeypatch):
    monkeypatch.setattr(arch, "_variant", {"backend": {"type": "cpu"}})
    arch._verify(0)
    assert fake_gpu == []


def test_cpu_tensors_skip_the_check(fake_gpu):
    arch.check(torch.zeros(2))  # would raise for a CUDA tensor on the fake device
    assert fake_gpu == []


def test_every_public_function_runs_the_check(monkeypatch):
    """Each public op calls _arch.check first (patched here to raise a sentinel)."""
    from .test_matrix import OPS

    class Sentinel(Exception):
        pass

    def refuse(t):
        raise Sentinel

    monkeypatch.setattr(arch, "check", refuse)
    for op in OPS:
        with pytest.raises(Sentinel):
            op.call(*op.build((2, 3), 8, torch.float32, "cpu", "contiguous"))
    x = torch.randn(2, 8)
    for fn, a in [(kernel.rope_interleaved_qk, (x[None], x[None], x, x)),
                  (kernel.rope_rotate_half_single, (x[None, None], x[None], x[None]))]:
        with pytest.raises(Sentinel):
            fn(*a)


def test_every_function_that_calls_an_op_checks_the_arch():
    """Source rule for the package: a public function whose body calls ``ops.<name>``
    calls ``_arch.check(...)`` too (new ops must use the shared helper)."""
    import ast

    pkg = Path(kernel.__file__).parent
    missing = []
    for f in sorted(pkg.glob("*.py")):
        for node in ast.parse(f.read_text()).body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            calls = [c.func for c in ast.walk(node) if isinstance(c, ast.Call)]
            names = {(c.value.id, c.attr) for c in calls
                     if isinstance(c, ast.Attribute) and isinstance(c.value, ast.Name)}
            if any(mod == "ops" for mod, _ in names) and ("_arch", "check") not in names:
                missing.append(f"{f.name}:{node.name}")
    assert not missing, f"public functions launching ops without _arch.check(x): {missing}"


def test_metadata_archs_are_the_check_input():
    assert arch.variant_metadata()["id"] == METADATA["id"]
    assert arch.built_archs() == METADATA["backend"].get("archs", [])


@requires_gpu
def test_gpu_this_device_is_covered():
    arch.reset_cache()
    x = torch.randn(2, 64, device="cuda")
    kernel.rmsnorm(x)
    assert torch.cuda.current_device() in arch._ok


@requires_gpu
def test_gpu_first_call_raises_on_an_uncovered_capability(monkeypatch):
    arch.reset_cache()
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (6, 0))
    with pytest.raises(RuntimeError, match=r"capability 6\.0"):
        kernel.gelu_tanh(torch.randn(2, 64, device="cuda"))
    arch.reset_cache()


def _cuobjdump():
    found = shutil.which("cuobjdump")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "cuobjdump").is_file():
            return str(Path(home) / "bin" / "cuobjdump")
    return None


def _cap(sm: str) -> str:
    """'90a' -> '9.0a', '100' -> '10.0', '75' -> '7.5'."""
    m = re.fullmatch(r"(\d+)(\d)([af]?)", sm)
    return f"{m[1]}.{m[2]}{m[3]}"


def test_embedded_sass_and_ptx_match_metadata():
    if BACKEND != "cuda":
        pytest.skip(f"the loaded variant is {BACKEND}: no device code to list")
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found (PATH, CUDA_HOME, /usr/local/cuda)")
    so = next(VARIANT.glob("*.so"))

    def listing(flag):
        p = subprocess.run([tool, flag, str(so)], capture_output=True, text=True)
        if p.returncode != 0 and "does not contain" not in p.stderr + p.stdout:
            pytest.fail(f"cuobjdump {flag} failed: {p.stderr}")
        return {_cap(m) for m in re.findall(r"\.sm_(\d+[af]?)\.(?:cubin|ptx)", p.stdout)}

    sass, ptx = listing("--list-elf"), listing("--list-ptx")
    declared = METADATA["backend"]["archs"]
    assert sass == {a.removesuffix("+PTX") for a in declared}, (sorted(sass), declared)
    assert ptx == {a.removesuffix("+PTX") for a in declared if a.endswith("+PTX")}, (sorted(ptx), declared)
