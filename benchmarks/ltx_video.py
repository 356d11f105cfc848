"""End-to-end LTX-Video benchmark: the diffusers LTXPipeline denoising loop + VAE decode,
eager vs this package's kernels (patch_ltx_video) vs torch.compile vs both, in one process.

The LTX-Video 0.9.x 2B transformer and the 0.9.0 VAE are built from their real configs
with random weights (the constructor defaults are the 2B config: shared/docs/op-semantics.md
§5.1, §7); nothing is downloaded. `--model PATH` loads a local diffusers checkpoint instead
(`LTXPipeline.from_pretrained(PATH, text_encoder=None, tokenizer=None)`). Prompt
embeddings are supplied directly: random T5-shaped [B, 128, 4096] with an attention mask
(and negative ones for classifier-free guidance, guidance_scale > 1).

    python benchmarks/ltx_video.py                        # 161 frames 512x768, all four configs
    python benchmarks/ltx_video.py --num-frames 49 --steps 30
    python benchmarks/ltx_video.py --configs baseline,kernels --no-decode
    python benchmarks/ltx_video.py --tiny --device cpu    # seconds, CPU (the smoke test)

Timing: total = wall time of the pipeline call (synchronized), denoise = first transformer
call to the end of the last scheduler step, transformer step = the transformer forward timed
with CUDA events by forward hooks (mean per step; one call per step, CFG is batched),
it/s = steps / denoise. Match: the final latents (before decode, same seed) of each
configuration vs the baseline's, see `--noise-ref`.
"""

import argparse
import contextlib
import math
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e2e_common as common  # noqa: E402

# LTX-Video's scheduler_config.json (FlowMatchEuler with resolution-dependent shift).
LTX_SCHEDULER = dict(num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=True,
                     base_shift=0.95, max_shift=2.05, base_image_seq_len=1024,
                     max_image_seq_len=4096, shift_terminal=0.1)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="local diffusers LTX-Video checkpoint dir (default: random weights)")
    p.add_argument("--tiny", action="store_true", help="tiny transformer + VAE (op-semantics §7), seconds on CPU")
    p.add_argument("--configs", default=",".join(common.CONFIGS),
                   help="comma list of baseline,kernels,compile,compile+kernels (baseline always runs first)")
    p.add_argument("--use-optimized-kernels", dest="kernels", action="store_true", default=None,
                   help="shorthand: --configs baseline,kernels (with --compile: baseline,compile+kernels)")
    p.add_argument("--no-optimized-kernels", dest="kernels", action="store_false",
                   help="shorthand: --configs baseline (with --compile: baseline,compile)")
    p.add_argument("--compile", action="store_true", help="with --use/--no-optimized-kernels: the compiled variant")
    p.add_argument("--compile-mode", default=None, help="torch.compile mode (default: default)")
    p.add_argument("--fullgraph", action="store_true", help="torch.compile(fullgraph=True) on the transformer forward")
    p.add_argument("--batch-size", type=int, default=1, help="prompts per call (CFG doubles the transformer batch)")
    p.add_argument("--num-frames", type=int, default=None, help="default 161 (tiny: 9)")
    p.add_argument("--height", type=int, default=None, help="default 512 (tiny: 32)")
    p.add_argument("--width", type=int, default=None, help="default 768 (tiny: 32)")
    p.add_argument("--steps", type=int, default=None, help="denoising steps (default 50; tiny: 2)")
    p.add_argument("--guidance-scale", type=float, default=3.0)
    p.add_argument("--text-len", type=int, default=None, help="T5 tokens (default 128; tiny: 16)")
    p.add_argument("--warmup-iterations", type=int, default=1, help="untimed pipeline calls per configuration")
    p.add_argument("--warmup-steps", type=int, default=2, help="denoising steps of each warm-up call (>= 2)")
    p.add_argument("--no-decode", action="store_true", help="output_type='latent': skip the VAE decode")
    p.add_argument("--vae-tiling", action="store_true", help="vae.enable_tiling() (less memory at 161 frames)")
    p.add_argument("--noise-ref", choices=["auto", "fp32", "math-sdpa", "none"], default="auto",
                   help="how the bf16 noise bound is measured: fp32 = the baseline pipeline again in float32 "
                        "(same weights, TF32 off); math-sdpa = the baseline again in the same dtype with SDPA's "
                        "math backend and cuBLAS's reduced-precision bf16/fp16 reduction flipped; auto = fp32")
    p.add_argument("--output", default=None, help="save the video (FILE.mp4; one per configuration) when imageio is installed")
    p.add_argument("--device", default=None, help="default cuda if available, else cpu")
    p.add_argument("--dtype", default="bf16", choices=sorted(common.DTYPES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results", default=str(common.REPO / "benchmarks" / "RESULTS.md"),
                   help="where the dated section goes (CUDA, not --tiny)")
    p.add_argument("--no-results", action="store_true", help="do not touch RESULTS.md")
    p.add_argument("--out", default=None, help="also write the section + json here (default $OUT if set)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    d = dict(num_frames=9, height=32, width=32, steps=2, text_len=16) if args.tiny else \
        dict(num_frames=161, height=512, width=768, steps=50, text_len=128)
    for k, v in d.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.steps < 2:
        p.error("--steps must be >= 2 (LTX's scheduler stretches sigmas to shift_terminal)")
    if args.kernels is not None:
        c = "compile" if args.compile else None
        args.configs = "baseline," + ("+".join(x for x in (c, "kernels") if x) if args.kernels else (c or "baseline"))
    names = common.parse_configs(args.configs)
    args.config_list = ["baseline"] + [c for c in names if c != "baseline"]
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.torch_dtype = common.DTYPES[args.dtype]
    if args.noise_ref == "auto":
        args.noise_ref = "fp32"
    return args


# ----------------------------------------------------------------------------- building


def build_pipeline(args):
    from diffusers import (AutoencoderKLLTXVideo, FlowMatchEulerDiscreteScheduler, LTXPipeline,
                           LTXVideoTransformer3DModel)

    if args.model:
        pipe = LTXPipeline.from_pretrained(args.model, text_encoder=None, tokenizer=None,
                                           torch_dtype=args.torch_dtype)
        return pipe.to(args.device)
    torch.manual_seed(args.seed)
    with torch.device(args.device):  # random init on the device: seconds for 2.3B parameters
        if args.tiny:
            tr = LTXVideoTransformer3DModel(in_channels=8, out_channels=8, num_attention_heads=4,
                                            attention_head_dim=8, cross_attention_dim=32,
                                            num_layers=2, caption_channels=32)
            vae = AutoencoderKLLTXVideo(
                latent_channels=8, block_out_channels=(8, 8, 8, 8), decoder_block_out_channels=(8, 8, 8, 8),
                layers_per_block=(1,) * 5, decoder_layers_per_block=(1,) * 5,
                spatio_temporal_scaling=(True, True, False, False),
                decoder_spatio_temporal_scaling=(True, True, False, False),
                decoder_inject_noise=(False,) * 5, upsample_residual=(False,) * 4,
                upsample_factor=(1,) * 4, timestep_conditioning=False, patch_size=1, patch_size_t=1)
            with torch.no_grad():  # non-trivial q/k norm weights, as the tests do
                for m in tr.modules():
                    if isinstance(m, torch.nn.RMSNorm) and m.weight is not None:
                        m.weight.normal_(1.0, 0.2)
        else:
            tr = LTXVideoTransformer3DModel()   # the 2B config (0.9.0 / 0.9.1 / 0.9.5)
            vae = AutoencoderKLLTXVideo()       # the 0.9.0 VAE, ratios 32 / 8
    sched = FlowMatchEulerDiscreteScheduler(**LTX_SCHEDULER)
    pipe = LTXPipeline(scheduler=sched, vae=vae, text_encoder=None, tokenizer=None, transformer=tr)
    pipe.to(args.device, args.torch_dtype)
    return pipe


def prompt_embeds(args, pipe):
    """Random T5-shaped embeddings with a padding mask (generated on the CPU: same values on
    every device), conditional and negative."""
    g = torch.Generator().manual_seed(args.seed + 1)
    B, L, C = args.batch_size, args.text_len, pipe.transformer.config.caption_channels

    def one(valid):
        e = torch.randn(B, L, C, generator=g) * 0.2
        m = torch.zeros(B, L, dtype=torch.long)
        m[:, :valid] = 1
        e = e * m[..., None]  # T5 outputs at padding are masked anyway
        return e.to(args.device, args.torch_dtype), m.to(args.device)

    pe, pm = one(max(1, L * 3 // 8))
    out = dict(prompt_embeds=pe, prompt_attention_mask=pm)
    if args.guidance_scale > 1:
        ne, nm = one(max(1, L // 16))
        out.update(negative_prompt_embeds=ne, negative_prompt_attention_mask=nm)
    return out


def shapes(args, pipe):
    sr, tr = pipe.vae_spatial_compression_ratio, pipe.vae_temporal_compression_ratio
    f, h, w = (args.num_frames - 1) // tr + 1, args.height // sr, args.width // sr
    cfg = 2 if args.guidance_scale > 1 else 1
    return dict(latent=[pipe.transformer.config.in_channels, f, h, w], tokens=f * h * w,
                transformer_batch=args.batch_size * cfg, text_len=args.text_len)


# ----------------------------------------------------------------------------- running


def run_pipeline(pipe, args, embeds, steps, label, output_type, show_bar=True):
    """One pipeline call; returns final latents (packed [B, S, C], before decode), the video
    (if decoded), wall ms, denoise-loop ms and per-call transformer ms."""
    dev = args.device
    tr = pipe.transformer
    step_t, loop_t = common.Timer(dev), common.Timer(dev)
    state = {"step": 0}
    final = {}
    bar = common.progress(steps, label) if show_bar and not args.quiet else None

    def pre(_m, _a, _k):
        if state["step"] == 0 and not loop_t.pairs and loop_t._open is None:
            loop_t.start()
        step_t.start()

    def post(_m, _a, _k, _o):
        step_t.stop()

    def on_step_end(_pipe, i, _t, kw):
        state["step"] = i + 1
        if i == steps - 1:
            loop_t.stop()
            final["latents"] = kw["latents"].detach().clone()
        if bar is not None:
            bar.update(1)
        return {}

    h1 = tr.register_forward_pre_hook(pre, with_kwargs=True)
    h2 = tr.register_forward_hook(post, with_kwargs=True)
    gen = torch.Generator(dev).manual_seed(args.seed)
    try:
        common.sync(dev)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = pipe(**embeds, height=args.height, width=args.width, num_frames=args.num_frames,
                       frame_rate=25, num_inference_steps=steps, guidance_scale=args.guidance_scale,
                       generator=gen, output_type=output_type, max_sequence_length=args.text_len,
                       callback_on_step_end=on_step_end, callback_on_step_end_tensor_inputs=["latents"],
                       return_dict=False)[0]
        common.sync(dev)
        wall_ms = (time.perf_counter() - t0) * 1e3
    finally:
        h1.remove()
        h2.remove()
        if bar is not None:
            bar.close()
    return dict(latents=final["latents"], video=None if output_type == "latent" else out,
                wall_ms=wall_ms, loop_ms=loop_t.total_ms(), step_ms=step_t.times_ms())


@contextlib.contextmanager
def noise_context(kind):
    """The baseline computed again with different but equivalent op orders."""
    if kind == "fp32":
        with common.tf32_off():
            yield
    elif kind == "math-sdpa":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        m = torch.backends.cuda.matmul
        old = m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction
        m.allow_bf16_reduced_precision_reduction = not old[0]
        m.allow_fp16_reduced_precision_reduction = not old[1]
        try:
            with sdpa_kernel([SDPBackend.MATH]):
                yield
        finally:
            m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction = old
    else:
        yield


def noise_reference(pipe, args, embeds):
    if args.noise_ref == "none":
        return None
    print(f"noise reference ({args.noise_ref}): the baseline again, latents only", flush=True)
    if args.noise_ref == "fp32":
        pipe.to(torch.float32)  # weights were rounded to bf16 at build: this upcast is exact
        emb = {k: (v.float() if v.is_floating_point() else v) for k, v in embeds.items()}
        try:
            with noise_context("fp32"):
                r = run_pipeline(pipe, args, emb, args.steps, "noise ref fp32", "latent")
        finally:
            pipe.to(args.torch_dtype)  # exact: back to the same bf16 values
    else:
        with noise_context(args.noise_ref):
            r = run_pipeline(pipe, args, embeds, args.steps, "noise ref", "latent")
    return r["latents"]


def apply_config(pipe, kernel, name, args):
    """Set up one configuration; returns (undo, info)."""
    tr = pipe.transformer
    undo, info = [], {}
    if "kernels" in name:
        handle = kernel.patch_ltx_video(tr)
        info["patched"] = dict(handle.counts)
        if handle.skipped:
            info["skipped"] = handle.skipped
        if not any(handle.counts.values()):
            raise RuntimeError(f"patch_ltx_video replaced nothing: {handle}")
        undo.append(handle.undo)
    if "compile" in name:
        common.compile_forward(tr, args, undo)

    def undo_all():
        for fn in undo:
            fn()

    return undo_all, info


def save_video(video, path, name, multi):
    try:
        import imageio  # noqa: F401
        from diffusers.utils import export_to_video
    except ImportError:
        print(f"--output: imageio is not installed; {name}'s video not saved")
        return None
    p = Path(path)
    if multi:
        p = p.with_name(f"{p.stem}-{name.replace('+', '-')}{p.suffix or '.mp4'}")
    export_to_video(list(video[0]), str(p), fps=25)
    print(f"saved {p}")
    return str(p)


def main(argv=None):
    args = parse_args(argv)
    try:
        import diffusers  # noqa: F401
    except ImportError:
        raise SystemExit("benchmarks/ltx_video.py needs diffusers (carry its wheel in .whl/)")
    diffusers.utils.logging.set_verbosity_error()  # the harmless _keep_in_fp32_modules note on every .to()
    dev = args.device
    print(f"LTX-Video e2e: device {dev}, dtype {args.dtype}, configs {args.config_list}", flush=True)
    kernel = common.load_kernel(dev) if any("kernels" in c for c in args.config_list) else None
    t0 = time.perf_counter()
    pipe = build_pipeline(args)
    pipe.set_progress_bar_config(disable=True)
    if args.vae_tiling:
        pipe.vae.enable_tiling()
    n_tr = sum(p.numel() for p in pipe.transformer.parameters())
    n_vae = sum(p.numel() for p in pipe.vae.parameters()) if pipe.vae is not None else 0
    shp = shapes(args, pipe)
    print(f"built in {time.perf_counter() - t0:.1f}s: transformer {n_tr / 1e6:.2f}M, VAE {n_vae / 1e6:.2f}M "
          f"params; latent {shp['latent']} -> {shp['tokens']} tokens, transformer batch "
          f"{shp['transformer_batch']}, text {shp['text_len']}, {args.steps} steps", flush=True)
    embeds = prompt_embeds(args, pipe)
    output_type = "latent" if args.no_decode else ("np" if args.output else "pt")

    noise = noise_reference(pipe, args, embeds)
    results, ref = {}, None
    for name in args.config_list:
        if torch.device(dev).type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        undo, info = apply_config(pipe, kernel, name, args)
        try:
            tw = time.perf_counter()
            for i in range(args.warmup_iterations):
                run_pipeline(pipe, args, embeds, min(args.steps, max(2, args.warmup_steps)),
                             f"{name} warm-up {i + 1}", output_type)
            warm_s = time.perf_counter() - tw
            r = run_pipeline(pipe, args, embeds, args.steps, name, output_type)
        finally:
            undo()
        r["warmup_s"] = warm_s
        r.update(info)
        if torch.device(dev).type == "cuda":
            r["peak_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
        if name == "baseline":
            ref = r["latents"]
            r["match"] = {"pass": bool(torch.isfinite(ref).all()), "reference": True,
                          "noise": None if noise is None else common.compare(noise, ref, None)["max_abs"],
                          "noise_cos": None if noise is None else common.noise_self_check(ref, noise)}
        else:
            r["match"] = common.compare(r["latents"], ref, noise)
        if args.output and r["video"] is not None:
            r["video_file"] = save_video(r["video"], args.output, name, len(args.config_list) > 1)
        r["step_mean_ms"] = sum(r["step_ms"]) / max(1, len(r["step_ms"]))
        r["its"] = args.steps / (r["loop_ms"] / 1e3) if r["loop_ms"] > 0 else float("nan")
        results[name] = r
        print(f"{name}: total {r['wall_ms'] / 1e3:.2f}s, transformer {r['step_mean_ms']:.2f} ms/step, "
              f"match {'PASS' if r['match']['pass'] else 'FAIL'}"
              + (f", patched {info['patched']}" if "patched" in info else ""), flush=True)
        del r["video"]

    header, rows = table(args, results)
    print()
    print(common.markdown_table(header, rows))
    ok = all(r["match"]["pass"] for r in results.values())
    print(f"\nmatch check: {'PASS' if ok else 'FAIL'} ({method_text(args)})")
    nb = results["baseline"]["match"].get("noise_cos")
    if nb is not None and nb < 0.9999:
        print(f"note: the two baseline runs themselves have cosine {nb:.6f} < 0.9999: the model amplifies "
              "rounding at these settings (random weights, many steps); that cosine is the bound")

    data = {"args": {k: v for k, v in vars(args).items() if k != "torch_dtype"}, "shapes": shp,
            "env": common.environment(dev), "params": {"transformer": n_tr, "vae": n_vae},
            "results": {k: {kk: vv for kk, vv in v.items() if kk != "latents"} for k, v in results.items()},
            "pass": ok}
    if torch.device(dev).type == "cuda" and not args.tiny and not args.no_results:
        env = data["env"]
        body = "\n".join([
            f"- GPU: {env.get('gpu')} ({env.get('gpu_mem_gib')} GiB); torch {env['torch']}, CUDA {env.get('cuda')}, "
            f"Python {env['python']}, diffusers {env.get('diffusers')}, kernels {env.get('kernels')}.",
            f"- Model: {'checkpoint ' + args.model if args.model else 'LTX-Video 0.9.x 2B transformer + 0.9.0 VAE, real configs, random weights'} "
            f"({n_tr / 1e9:.2f}B + {n_vae / 1e6:.0f}M params), {args.dtype}.",
            f"- Shapes: batch {args.batch_size}, {args.num_frames} frames {args.height}x{args.width}, latent "
            f"{shp['latent']} = {shp['tokens']} tokens, transformer batch {shp['transformer_batch']} "
            f"(CFG {args.guidance_scale}), text {shp['text_len']} tokens, {args.steps} steps, "
            f"decode {'off' if args.no_decode else 'on'}, {args.warmup_iterations} warm-up call(s) of {args.warmup_steps} steps.",
            "- Method: total = synchronized wall time of the pipeline call; transformer step = CUDA events "
            "around the transformer forward (forward hooks), mean per step; it/s = steps / denoising loop; "
            f"compile = torch.compile of the transformer forward (mode {args.compile_mode or 'default'}, "
            f"fullgraph {args.fullgraph}); kernels = patch_ltx_video. Match: {method_text(args)}.",
            f"- Command: `python benchmarks/ltx_video.py {' '.join(sys.argv[1:] if argv is None else argv)}`",
            "", common.markdown_table(header, rows)])
        title = f"{data['env']['date'][:10]} — LTX-Video end to end ({args.num_frames} frames {args.height}x{args.width}, {env.get('gpu')})"
        common.write_results("ltx_video", title, body, data, args.results, args.out)
    elif args.out:
        common.write_results("ltx_video", "LTX-Video end to end", "\n".join([common.markdown_table(header, rows)]),
                             data, None, args.out)
    return data


def method_text(args):
    ref = {"fp32": "the baseline pipeline again in float32 (same bf16-rounded weights, TF32 off)",
           "math-sdpa": "the baseline again with SDPA's math backend and cuBLAS reduced-precision reduction flipped",
           "none": "no noise run: cosine only"}[args.noise_ref]
    return (f"final latents (before decode, same seed) vs the baseline's: cosine >= min(0.9999, the noise "
            f"run's cosine to the baseline) and max|Δ| <= the bf16 noise = max|baseline - {args.noise_ref} run|; "
            f"noise run: {ref}")


def table(args, results):
    base = results["baseline"]
    cuda = torch.device(args.device).type == "cuda"
    header = ["configuration", "total s", "denoise s", "transformer ms/step", "it/s",
              "step speedup", "total speedup"] + (["peak GiB"] if cuda else []) + ["match vs baseline"]
    rows = []
    for name, r in results.items():
        rows.append([name.replace("+", " + "), f"{r['wall_ms'] / 1e3:.2f}", f"{r['loop_ms'] / 1e3:.2f}",
                     f"{r['step_mean_ms']:.2f}", f"{r['its']:.2f}",
                     f"{base['step_mean_ms'] / r['step_mean_ms']:.3f}x", f"{base['wall_ms'] / r['wall_ms']:.3f}x"]
                    + ([f"{r['peak_gib']:.1f}"] if cuda else []) + [common.match_text(r["match"])])
    return header, rows


if __name__ == "__main__":
    d = main()
    sys.exit(0 if d["pass"] else 1)
