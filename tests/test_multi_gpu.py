"""Every op with its inputs on cuda:1 while the current device is cuda:0 (issue 8).

Kernels that launch on the current device instead of the tensor's, or on the default
stream instead of the tensor device's current stream, corrupt outputs under
device_map="auto" and pipeline parallelism. Needs two GPUs; skips otherwise.
"""

import pytest
import torch

from .test_matrix import OP_IDS, OPS, _as_list
from .util import HAS_GPU

pytestmark = [
    pytest.mark.kernels_ci,
    pytest.mark.skipif(
        not (HAS_GPU and torch.cuda.device_count() >= 2),
        reason="needs two CUDA GPUs and the CUDA variant "
        f"(found {torch.cuda.device_count() if torch.cuda.is_available() else 0} GPU(s))",
    ),
]


def small_args(op, device):
    torch.manual_seed(1234)  # the same inputs on both devices
    return op.build((2, 5), 256, torch.bfloat16, device, "qkv")


def to(args, device):
    return [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]


@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
def test_inputs_on_cuda1_current_device_cuda0(op):
    args1 = small_args(op, "cuda:1")
    expected = [o.cpu() for o in _as_list(op.call(*to(args1, "cuda:0")))]
    with torch.cuda.device(0):
        outs = _as_list(op.call(*args1))
    torch.cuda.synchronize(1)
    for got, want in zip(outs, expected):
        assert got.device == torch.device("cuda:1"), f"{op.name}: output on {got.device}"
        assert torch.equal(got.cpu(), want), f"{op.name}: wrong result for inputs on cuda:1"


@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
def test_inputs_on_cuda1_behind_a_side_stream(op):
    """Inputs are written on a side stream of cuda:1 behind a long sleep; the op runs with
    that stream current on cuda:1 but cuda:0 as the current device. A launch on another
    stream (or device) would read the inputs before they are written."""
    fresh = small_args(op, "cuda:1")
    expected = [o.cpu() for o in _as_list(op.call(*to(fresh, "cuda:0")))]
    args1 = [torch.zeros_like(a) if isinstance(a, torch.Tensor) else a for a in fresh]
    side = torch.cuda.Stream(device="cuda:1")
    side.wait_stream(torch.cuda.current_stream(1))
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        for dst, src in zip(args1, fresh):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        with torch.cuda.device(0):
            outs = _as_list(op.call(*args1))
    torch.cuda.synchronize(1)
    for got, want in zip(outs, expected):
        assert torch.equal(got.cpu(), want), f"{op.name}: raced with the side stream"
