"""Shared pieces of the end-to-end benchmarks (benchmarks/ltx_video.py, benchmarks/llama.py):
kernel loading, timers, the match check, the table and the RESULTS.md section."""

import contextlib
import datetime
import json
import os
import platform
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
REPO_ID = "org/ltx-kernels"
CONFIGS = ["baseline", "kernels", "compile", "compile+kernels"]
DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
          "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}


def load_kernel(device):
    """The package as users load it: get_kernel("org/ltx-kernels", version=1), redirected to
    this checkout's build/ through LOCAL_KERNELS unless the caller set it."""
    import kernels

    os.environ.setdefault("LOCAL_KERNELS", f"{REPO_ID}={REPO}")
    kwargs = {"backend": "cpu"} if torch.device(device).type == "cpu" else {}
    try:
        return kernels.get_kernel(REPO_ID, version=1, **kwargs)
    except TypeError:  # a kernels without backend=
        return kernels.get_kernel(REPO_ID, version=1)


def mark_transformers_layers(pairs):
    """transformers marks its layers for kernelize only when it accepts the installed kernels
    version; otherwise its decorator is a no-op. Mark the (class, layer name) pairs that
    lack the mark with kernels.replace_kernel_forward_from_hub; returns the names marked."""
    import kernels

    marked = []
    for cls, name in pairs:
        if cls is not None and getattr(cls, "kernel_layer_name", None) is None:
            kernels.replace_kernel_forward_from_hub(cls, name)
            marked.append(name)
    return marked


def parse_configs(text):
    names = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in names if c not in CONFIGS]
    if bad:
        raise SystemExit(f"unknown configuration(s) {bad}; choose from {CONFIGS}")
    return names


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class Timer:
    """Intervals on the device's own clock: CUDA events on CUDA, perf_counter elsewhere.
    start()/stop() pairs; total_ms() synchronizes once at the end."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.pairs = []
        self._open = None

    def _mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def start(self):
        self._open = self._mark()

    def stop(self):
        if self._open is not None:
            self.pairs.append((self._open, self._mark()))
            self._open = None

    def times_ms(self):
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in self.pairs]
        return [(b - a) * 1e3 for a, b in self.pairs]

    def total_ms(self):
        return sum(self.times_ms())


def progress(total, desc):
    """tqdm if importable, else a line per step."""
    try:
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True)
    except ImportError:
        class _Bar:
            n = 0

            def update(self, k=1):
                self.n += k
                print(f"  {desc}: step {self.n}/{total}", flush=True)

            def close(self):
                pass

        return _Bar()


def compare(out, ref, noise_ref, min_cos=0.9999):
    """The match check of issue 5: cosine(out, ref) >= the cosine bound and max|out - ref|
    within the bf16 noise, i.e. max|ref - noise_ref| where noise_ref is the baseline computed
    again in a different but equivalent way (see each script's --noise-ref). The cosine bound
    is min_cos, or the noise run's own cosine to ref when that is lower: a model that
    amplifies rounding (random-weight Llama, 4 layers, 4096 tokens: 0.99967 on 2026-12-04)
    cannot be asked to agree with the baseline more closely than the baseline agrees with
    itself. noise_ref None (or out is ref's own run): only min_cos is checked."""
    # float64: an fp32 cosine over ~10^7 elements drifts past 1.
    o, r = out.detach().double().flatten().cpu(), ref.detach().double().flatten().cpu()
    finite = bool(torch.isfinite(o).all())
    cos = torch.nn.functional.cosine_similarity(o, r, dim=0).item()
    diff = (o - r).abs().max().item()
    noise, bound = None, min_cos
    if noise_ref is not None:
        noise = (r - noise_ref.detach().double().flatten().cpu()).abs().max().item()
        bound = min(min_cos, noise_self_check(ref, noise_ref))
    ok = finite and cos >= bound and (noise is None or diff <= noise)
    return {"pass": ok, "cos": cos, "max_abs": diff, "noise": noise, "cos_bound": bound,
            "finite": finite}


def noise_self_check(ref, noise_ref):
    """How close the two baseline runs themselves are (cosine); a low value means the model
    amplifies rounding so much that the cosine criterion is not meaningful at these settings."""
    r, n = ref.detach().double().flatten().cpu(), noise_ref.detach().double().flatten().cpu()
    return torch.nn.functional.cosine_similarity(r, n, dim=0).item()


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def environment(device):
    info = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "torch": torch.__version__, "python": platform.python_version(), "device": str(device)}
    if torch.device(device).type == "cuda":
        p = torch.cuda.get_device_properties(device)
        info.update(gpu=p.name, gpu_mem_gib=round(p.total_memory / 2**30, 1), cuda=torch.version.cuda)
    for mod in ("diffusers", "transformers", "kernels"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:
            pass
    return info


def write_results(stem, title, body, data, results_file=None, out_dir=None):
    """Insert a dated section into results_file (benchmarks/RESULTS.md keeps newest first,
    below its header) and, with out_dir (default $OUT: the device tool copies it back),
    write section.md, results.json and the updated RESULTS.md there too."""
    section = f"## {title}\n\n{body.strip()}\n"
    out_dir = out_dir or os.environ.get("OUT")
    if results_file is not None:
        path = Path(results_file)
        text = path.read_text() if path.exists() else "# Measured results\n"
        marker = text.find("\n## ")
        text = (text.rstrip() + "\n\n" + section) if marker < 0 else (
            text[:marker + 1] + section + "\n" + text[marker + 1:])
        path.write_text(text)
        print(f"added the section to {path}")
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{stem}_section.md").write_text(section)
        (out / f"{stem}_results.json").write_text(json.dumps(data, indent=1, default=str))
        if results_file is not None and Path(results_file).exists():
            (out / "RESULTS.md").write_text(Path(results_file).read_text())
        print(f"wrote {stem}_section.md, {stem}_results.json to {out}")


@contextlib.contextmanager
def tf32_off():
    """float32 matmuls without TF32: the fp32 noise reference of both scripts."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def compile_forward(module, args, undo):
    """torch.compile(module.forward) as an instance attribute; registers its undo first."""
    assert "forward" not in module.__dict__, "the forward is already overridden"
    kw = {"fullgraph": args.fullgraph, "dynamic": False}
    if args.compile_mode:
        kw["mode"] = args.compile_mode
    module.forward = torch.compile(module.forward, **kw)

    def uncompile():
        del module.forward
        torch._dynamo.reset()

    undo.insert(0, uncompile)


def match_text(m):
    """The "match vs baseline" cell of a result row."""
    if m.get("reference"):
        noise = "" if m["noise"] is None else f" (noise max|Δ| {m['noise']:.3g}, cos {m['noise_cos']:.6f})"
        return "reference" + noise
    rel = "" if m["noise"] is None else (" <= " if m["max_abs"] <= m["noise"] else " > ") + f"{m['noise']:.3g}"
    return f"{'PASS' if m['pass'] else 'FAIL'} (cos {m['cos']:.6f}, max|Δ| {m['max_abs']:.3g}{rel})"
