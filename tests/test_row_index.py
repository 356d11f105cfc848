"""torch-ext/ops/row_index.h's DivU32 (division by a multiply, which the AdaLN and gated
residual kernels and the CPU backend use to unravel rows, and the q/k prologue's CUDA kernel to
split tokens) against `/`, compiled on the host.
The op tests reach it through the row spaces they make; this one covers every divisor up to
20 000, the powers of two and their neighbours, and random large divisors, each at the
numerators where a wrong magic number shows first (around multiples of d, and 2^32 - 1)."""

import shutil
import subprocess

import pytest

from .util import REPO

pytestmark = pytest.mark.kernels_ci

CHECK = r"""
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>
#include "row_index.h"

int main() {
  std::mt19937_64 g(7);
  std::vector<uint32_t> ds;
  for (uint32_t d = 2; d <= 20000; ++d) ds.push_back(d);
  for (int l = 2; l <= 31; ++l) {
    const uint64_t p = uint64_t{1} << l;
    ds.push_back(static_cast<uint32_t>(p - 1));
    ds.push_back(static_cast<uint32_t>(p));
    if (l < 31) ds.push_back(static_cast<uint32_t>(p + 1));
  }
  for (int k = 0; k < 20000; ++k) ds.push_back(static_cast<uint32_t>(2 + g() % ((uint64_t{1} << 31) - 1)));
  long bad = 0;
  for (uint32_t d : ds) {
    const ltx::DivU32 f(d);
    const uint32_t top = 0xffffffffu / d * d;
    const uint32_t edge[] = {0u, 1u, d - 1, d, d + 1, 2 * d - 1, 2 * d, top - 1, top,
                             0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu};
    for (uint32_t n : edge) bad += f.div(n) != n / d;
    for (int k = 0; k < 16; ++k) {
      const uint32_t n = static_cast<uint32_t>(g());
      bad += f.div(n) != n / d;
    }
  }
  std::printf("%zu divisors, %ld wrong\n", ds.size(), bad);
  return bad != 0;
}
"""


def test_div_u32_matches_division(tmp_path):
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    src = tmp_path / "div_check.cpp"
    src.write_text(CHECK)
    exe = tmp_path / "div_check"
    subprocess.run([cxx, "-O2", "-std=c++17", f"-I{REPO / 'torch-ext' / 'ops'}", str(src), "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
