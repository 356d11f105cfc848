"""`kernels benchmark` workloads for ltx-kernels (one Benchmark class per op family).

    kernels benchmark ./                 # from the repo root, on a local build (build/)
    kernels benchmark org/ltx-kernels@v1 # from the Hub

The runner (kernels 0.17.2, ``kernels.cli.benchmark``) picks the device from the loaded
variant's backend, calls ``setup_<w>``, then ``benchmark_<w>`` (which writes
``self.out``) and compares it with ``verify_<w>()`` (the PyTorch expression the op
replaces) by ``torch.allclose(atol=1e-2)``, then times host wall clock with a device sync.
Workloads are LTX-Video / Llama shapes on CUDA and small ones on the CPU. Inputs are
bounded (uniform) and weights / modulation chosen so that outputs stay under ~1 in
magnitude: the runner's check is allclose with atol=1e-2 and rtol=1e-5, and a bf16 value
in [2, 4) is 0.016 per ulp, while the ops may differ from their modules by 1-2 ulp (the
double-rounding modules, different rsqrt/tanh). This is the
Hub's convention, not our bandwidth measurement: see ``benchmarks/bench_ops.py``.
"""

import math

import torch
import torch.nn.functional as F
from kernels.benchmark import Benchmark


def _big(dev):
    return dev == "cuda"


def _randn(shape, dev, dtype=torch.bfloat16, scale=1.0, offset=0.0):
    """offset + scale * U(-1, 1): bounded, so outputs stay below 1 in magnitude (see the
    module docstring: the runner's fixed atol)."""
    return (offset + scale * (2 * torch.rand(shape) - 1)).to(dev, dtype)


class RMSNormBenchmark(Benchmark):
    seed = 0

    def setup_ltx_no_weight(self):  # LTX norm1/norm2: diffusers RMSNorm, no weight
        shape = (2, 8064, 2048) if _big(self.device) else (2, 256, 2048)
        self.x = _randn(shape, self.device)

    def benchmark_ltx_no_weight(self):
        self.out = self.kernel.rmsnorm(self.x, None, 1e-6)

    def verify_ltx_no_weight(self):
        v = self.x.float().pow(2).mean(-1, keepdim=True)
        return (self.x * torch.rsqrt(v + 1e-6)).to(self.x.dtype)

    def setup_llama(self):  # transformers LlamaRMSNorm, bf16 weight
        shape = (16384, 4096) if _big(self.device) else (512, 4096)
        self.x = _randn(shape, self.device)
        self.w = _randn(shape[-1], self.device, scale=0.05, offset=0.5)

    def benchmark_llama(self):
        self.out = self.kernel.rmsnorm(self.x, self.w, 1e-6, semantics="llama")

    def verify_llama(self):
        h = self.x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.w * h.to(self.x.dtype)

    def setup_per_head(self):  # per-head q/k norm, torch.nn.RMSNorm semantics
        shape = (8064, 32, 128) if _big(self.device) else (256, 32, 128)
        self.x = _randn(shape, self.device)
        self.w = _randn(shape[-1], self.device, scale=0.05, offset=0.5)

    def benchmark_per_head(self):
        self.out = self.kernel.rmsnorm(self.x, self.w, 1e-5, semantics="torch")

    def verify_per_head(self):
        return F.rms_norm(self.x, (self.x.shape[-1],), self.w, 1e-5)


class ActivationBenchmark(Benchmark):
    seed = 0

    def setup_gelu_tanh(self):  # LTX feed-forward activation
        shape = (2, 8064, 8192) if _big(self.device) else (2, 128, 8192)
        self.x = _randn(shape, self.device)

    def benchmark_gelu_tanh(self):
        self.out = self.kernel.gelu_tanh(self.x)

    def verify_gelu_tanh(self):
        return F.gelu(self.x, approximate="tanh")

    def setup_gelu_tanh_and_mul(self):  # vLLM / kernels-community call form, gate first
        rows = 16128 if _big(self.device) else 128
        self.x = _randn((rows, 2 * 8192), self.device)
        self.out = torch.empty(rows, 8192, device=self.device, dtype=self.x.dtype)

    def benchmark_gelu_tanh_and_mul(self):
        self.kernel.gelu_tanh_and_mul(self.out, self.x)

    def verify_gelu_tanh_and_mul(self):
        d = self.x.shape[-1] // 2
        return F.gelu(self.x[..., :d], approximate="tanh") * self.x[..., d:]

    def setup_geglu(self):  # diffusers GEGLU order: hidden * gelu(gate)
        rows = 16128 if _big(self.device) else 128
        self.x = _randn((rows, 2 * 8192), self.device)

    def benchmark_geglu(self):
        self.out = self.kernel.geglu(self.x)

    def verify_geglu(self):
        h, g = self.x.chunk(2, dim=-1)
        return h * F.gelu(g)


class RopeBenchmark(Benchmark):
    seed = 0

    def setup_ltx_interleaved_qk(self):  # LTX-Video RoPE on [B, S, inner_dim], fp32 tables
        b, s, d = (2, 8064, 2048) if _big(self.device) else (1, 256, 2048)
        theta = torch.rand(b, s, d // 2, dtype=torch.float64) * 2 * math.pi
        self.cos = theta.cos().float().repeat_interleave(2, -1).to(self.device)
        self.sin = theta.sin().float().repeat_interleave(2, -1).to(self.device)
        self.q = _randn((b, s, d), self.device, scale=0.7)
        self.k = _randn((b, s, d), self.device, scale=0.7)

    def benchmark_ltx_interleaved_qk(self):
        self.out = torch.stack(self.kernel.rope_interleaved_qk(self.q, self.k, self.cos, self.sin))

    def verify_ltx_interleaved_qk(self):
        def rot(x):
            re, im = x.unflatten(-1, (-1, 2)).unbind(-1)
            xr = torch.stack([-im, re], dim=-1).flatten(-2)
            return (x.float() * self.cos + xr.float() * self.sin).to(x.dtype)

        return torch.stack((rot(self.q), rot(self.k)))

    def setup_ltx_interleaved_qk_pair(self):  # the same with pair tables [B, S, D/2]
        self.setup_ltx_interleaved_qk()
        self.cos_pair = self.cos[..., ::2].contiguous()
        self.sin_pair = self.sin[..., ::2].contiguous()

    def benchmark_ltx_interleaved_qk_pair(self):
        self.out = torch.stack(self.kernel.rope_interleaved_qk(self.q, self.k, self.cos_pair, self.sin_pair))

    def verify_ltx_interleaved_qk_pair(self):
        return self.verify_ltx_interleaved_qk()

    def setup_llama_rotate_half(self):  # Llama-3-8B: 32 q heads, 8 kv heads, head dim 128
        s = 8192 if _big(self.device) else 256
        inv = 1.0 / (500000.0 ** (torch.arange(0, 128, 2, dtype=torch.float32) / 128))
        fr = torch.arange(s, dtype=torch.float32)[:, None] * inv[None, :]
        emb = torch.cat((fr, fr), -1)[None]
        self.cos = emb.cos().to(self.device, torch.bfloat16)
        self.sin = emb.sin().to(self.device, torch.bfloat16)
        self.q = _randn((1, s, 32, 128), self.device, scale=0.7).transpose(1, 2)  # transformers' layout
        self.k = _randn((1, s, 8, 128), self.device, scale=0.7).transpose(1, 2)

    def benchmark_llama_rotate_half(self):
        q, k = self.kernel.rope_rotate_half(self.q, self.k, self.cos, self.sin)
        self.out = torch.cat((q, k), dim=1)

    def verify_llama_rotate_half(self):
        def rh(x):
            h = x.shape[-1] // 2
            return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

        c, s = self.cos.unsqueeze(1), self.sin.unsqueeze(1)
        return torch.cat((self.q * c + rh(self.q) * s, self.k * c + rh(self.k) * s), dim=1)


class AdaLNBenchmark(Benchmark):
    seed = 0

    def _inputs(self, per_token):
        b, s, d = (2, 8064, 2048) if _big(self.device) else (1, 256, 2048)
        mod = (b, s, d) if per_token else (b, 1, d)
        self.x = _randn((b, s, d), self.device)
        self.scale = _randn(mod, self.device, scale=0.05, offset=-0.5)
        self.shift = _randn(mod, self.device, scale=0.05)
        self.x_res = _randn((b, s, d), self.device, scale=0.5)
        self.y = _randn((b, s, d), self.device)
        self.gate = _randn(mod, self.device, scale=0.3)

    def setup_adaln_rms(self):  # LTX: norm1(x) * (1 + scale_msa) + shift_msa
        self._inputs(per_token=False)

    def benchmark_adaln_rms(self):
        self.out = self.kernel.adaln(self.x, self.scale, self.shift, None, 1e-6, "rms")

    def verify_adaln_rms(self):
        v = self.x.float().pow(2).mean(-1, keepdim=True)
        n = (self.x * torch.rsqrt(v + 1e-6)).to(self.x.dtype)
        return n * (1 + self.scale) + self.shift

    def setup_adaln_layer_per_token(self):  # FLUX/DiT LayerNorm modulation, per-token tables
        self._inputs(per_token=True)

    def benchmark_adaln_layer_per_token(self):
        self.out = self.kernel.adaln(self.x, self.scale, self.shift, None, 1e-6, "layer")

    def verify_adaln_layer_per_token(self):
        n = F.layer_norm(self.x, (self.x.shape[-1],), eps=1e-6)
        return n * (1 + self.scale) + self.shift

    def setup_gated_residual(self):  # LTX: hidden_states + attn_output * gate_msa
        self._inputs(per_token=False)

    def benchmark_gated_residual(self):
        self.out = self.kernel.gated_residual(self.x_res, self.y, self.gate)

    def verify_gated_residual(self):
        return self.x_res + self.y * self.gate
