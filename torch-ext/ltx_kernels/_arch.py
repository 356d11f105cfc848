"""The GPU-capability check every public function runs at first CUDA use.

A CUDA build carries device code only for the capabilities in its ``metadata.json``
(``backend.archs``, e.g. ``["10.0", "12.0+PTX", "7.5", ...]``). On a GPU outside that
list the first launch fails with "no kernel image" and can take the process down, so the
public functions call ``check(t)`` first. It raises a RuntimeError naming the GPU's
capability and the built list instead.

Rules (the same as ``kernels``' ArchValidator, ``kernels/archs.py``):
  ``X.Y``      SASS: same major, minor >= Y (binary compatible within a major);
  ``X.Ya``     exactly X.Y (architecture-specific features);
  ``X.Yf``     same major, minor >= Y (family-specific);
  ``X.Y+PTX``  also any capability >= X.Y (PTX is JIT-compiled by the driver).
Unknown strings are ignored; if none parses, nothing is checked.

Cost: eager calls do ``t.is_cuda`` and, for CUDA tensors, one set lookup per call once
the device index has passed. Under torch.compile the check is kept out of the traced
code (``torch.compiler.is_compiling()`` short-circuits it, so Dynamo adds no guard) and
runs instead from the ops' fake implementations (``check_fake``), i.e. at trace time on
the device the graph is compiled for.
"""

import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch

_METADATA = Path(__file__).parent / "metadata.json"

_ok = set()  # CUDA device indices that passed
_bad: Dict[int, str] = {}  # device index -> the error message (raised on every call)
_variant: Optional[dict] = None


def variant_metadata() -> dict:
    """This variant's metadata.json ({} when absent, e.g. the source tree)."""
    global _variant
    if _variant is None:
        try:
            _variant = json.loads(_METADATA.read_text())
        except (OSError, ValueError):
            _variant = {}
    return _variant


def built_archs() -> List[str]:
    """backend.archs of this variant ([] for CPU variants or without metadata)."""
    backend = variant_metadata().get("backend") or {}
    return list(backend.get("archs") or [])


def parse_arch(arch: str) -> Optional[Tuple[int, int, str, bool]]:
    """``"9.0a+PTX"`` -> (9, 0, "a", True); None when not of the form X.Y[a|f][+PTX]."""
    ptx = arch.endswith("+PTX")
    if ptx:
        arch = arch[: -len("+PTX")]
    suffix = arch[-1:] if arch[-1:] in ("a", "f") else ""
    if suffix:
        arch = arch[:-1]
    major, dot, minor = arch.partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        return None
    return int(major), int(minor), suffix, ptx


def arch_supports(arch: str, capability: Tuple[int, int]) -> Optional[bool]:
    """Whether code built for ``arch`` runs on ``capability``; None for an unknown string."""
    parsed = parse_arch(arch)
    if parsed is None:
        return None
    major, minor, suffix, ptx = parsed
    cap = (int(capability[0]), int(capability[1]))
    if suffix == "a":
        return cap == (major, minor)
    same_major = cap[0] == major and cap[1] >= minor
    if ptx and cap >= (major, minor):
        return True
    return same_major


def supports(archs: Sequence[str], capability: Tuple[int, int]) -> bool:
    """True if any of ``archs`` runs on ``capability`` (or none of them parses)."""
    verdicts = [arch_supports(a, capability) for a in archs]
    known = [v for v in verdicts if v is not None]
    return not known or any(known)


def mismatch_message(archs: Sequence[str], capability: Tuple[int, int], device_name: str = "") -> str:
    major, minor = capability
    name = f" ({device_name})" if device_name else ""
    return (
        f"ltx_kernels: this GPU{name} has CUDA capability {major}.{minor} (sm_{major}{minor}), "
        f"but this build of ltx-kernels (variant {variant_metadata().get('id', '?')}) only has "
        f"device code for: {', '.join(sorted(archs, key=_arch_order))}. Rebuild with "
        f"`python tools/build.py --arch {major}.{minor}` (or add {major}.{minor} to "
        f"cuda-capabilities in build.toml), or run on a supported GPU."
    )


def _arch_order(a: str):
    p = parse_arch(a)
    return (0, p[0], p[1], a) if p else (1, 0, 0, a)


def _verify(index: int) -> None:
    """Slow path, once per device index: compare its capability with the built list."""
    if index in _bad:
        raise RuntimeError(_bad[index])
    archs = built_archs()
    if archs and torch.version.hip is None:
        cap = torch.cuda.get_device_capability(index)
        if not supports(archs, cap):
            _bad[index] = mismatch_message(archs, cap, torch.cuda.get_device_name(index))
            raise RuntimeError(_bad[index])
    _ok.add(index)


def check(t: torch.Tensor) -> None:
    """Raise RuntimeError if t is on a CUDA device this build has no code for.

    Eager: a dict lookup per call after the first. Under torch.compile: a no-op in the
    traced code (the fake implementations call check_fake instead)."""
    if t.is_cuda and not torch.compiler.is_compiling():
        index = t.get_device()
        if index not in _ok:
            _verify(index)


def check_fake(t: torch.Tensor) -> None:
    """The same check from a fake implementation (runs as plain Python while tracing).
    Tracing for CUDA on a machine without a GPU (export, AOT) checks nothing."""
    if t.device.type == "cuda" and torch.cuda.is_available():
        index = t.device.index if t.device.index is not None else torch.cuda.current_device()
        if index not in _ok:
            _verify(index)


def reset_cache() -> None:
    """Forget the per-device verdicts and the metadata (tests)."""
    global _variant
    _ok.clear()
    _bad.clear()
    _variant = None
