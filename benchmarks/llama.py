"""End-to-end transformers benchmark: a Llama-3-8B-shaped decoder (hidden 4096, 32 heads,
8 KV heads, intermediate 14336, vocab 128256; 4 layers, random weights, bf16), prefill of
4096 tokens then decode into a StaticCache, eager vs kernels.kernelize with this package's
layers vs torch.compile vs both, in one process.

    python benchmarks/llama.py                          # all four configs
    python benchmarks/llama.py --configs baseline,kernels --decode-tokens 64
    python benchmarks/llama.py --tiny --device cpu      # seconds, CPU (the smoke test)

Kernels: `kernels.kernelize(model, mode=Mode.INFERENCE[ | Mode.TORCH_COMPILE])` under
`use_kernel_mapping({"RMSNorm": {device: LocalLayerRepository(<repo>, layer_name="RMSNorm")}})`
(the README's mapping; `--hidden-act gelu_pytorch_tanh` also maps `GeluTanh`). Llama-3 uses
SiLU, which this package has no layer for, so only the 9 RMSNorms are replaced.
Decode feeds a fixed random token sequence (teacher forcing), so every configuration
computes the same thing; the match check compares the last prefill logits and all decode
logits with the baseline's (see --noise-ref).
"""

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e2e_common as common  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="tiny Llama (op-semantics §7), seconds on CPU")
    p.add_argument("--configs", default=",".join(common.CONFIGS),
                   help="comma list of baseline,kernels,compile,compile+kernels (baseline always runs first)")
    p.add_argument("--layers", type=int, default=None, help="decoder layers (default 4; tiny 2)")
    p.add_argument("--hidden-act", default="silu", help="silu (Llama-3), gelu_pytorch_tanh, gelu")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--prefill-tokens", type=int, default=None, help="default 4096 (tiny 32)")
    p.add_argument("--decode-tokens", type=int, default=None, help="default 128 (tiny 8)")
    p.add_argument("--warmup-iterations", type=int, default=2,
                   help="untimed runs; the first one initialises the StaticCache, which makes compile retrace once")
    p.add_argument("--warmup-decode", type=int, default=4, help="decode steps of each warm-up")
    p.add_argument("--compile-mode", default=None, help="torch.compile mode (e.g. reduce-overhead)")
    p.add_argument("--fullgraph", action="store_true")
    p.add_argument("--noise-ref", choices=["fp32", "none"], default="fp32",
                   help="fp32: the baseline again in float32 (same bf16-rounded weights, TF32 off) bounds max|Δ|")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", default="bf16", choices=sorted(common.DTYPES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results", default=str(common.REPO / "benchmarks" / "RESULTS.md"))
    p.add_argument("--no-results", action="store_true")
    p.add_argument("--out", default=None, help="also write the section + json here (default $OUT if set)")
    args = p.parse_args(argv)
    d = dict(layers=2, prefill_tokens=32, decode_tokens=8) if args.tiny else \
        dict(layers=4, prefill_tokens=4096, decode_tokens=128)
    for k, v in d.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    names = common.parse_configs(args.configs)
    args.config_list = ["baseline"] + [c for c in names if c != "baseline"]
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.torch_dtype = common.DTYPES[args.dtype]
    return args


def build_model(args):
    from transformers import LlamaConfig, LlamaForCausalLM

    if args.tiny:
        cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
                          max_position_embeddings=256, rms_norm_eps=1e-6, hidden_act=args.hidden_act)
    else:  # Llama-3-8B's shape (meta-llama/Meta-Llama-3-8B config.json), fewer layers
        cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                          num_hidden_layers=args.layers, num_attention_heads=32, num_key_value_heads=8,
                          max_position_embeddings=8192, rms_norm_eps=1e-5, hidden_act=args.hidden_act,
                          rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                          bos_token_id=128000, eos_token_id=128001, tie_word_embeddings=False)
    torch.manual_seed(args.seed)
    with torch.device(args.device):
        model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # non-trivial norm weights (all ones would hide a dropped multiply)
        for m in model.modules():
            if type(m).__name__.endswith("RMSNorm"):
                m.weight.normal_(1.0, 0.2)
    return model.to(args.torch_dtype).eval()


def make_cache(model, args):
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=args.prefill_tokens + args.decode_tokens)


def run_once(model, cache, args, ids, dec_ids, n_decode):
    """Prefill then n_decode teacher-forced decode steps; returns logits [B, 1 + n, V] and
    timings (prefill ms, decode ms per step)."""
    dev, B, P = args.device, ids.shape[0], ids.shape[1]
    pre_t, dec_t = common.Timer(dev), common.Timer(dev)
    logits = []
    with torch.inference_mode():
        cache.reset()  # its tensors are inference tensors (lazily made in the first run)
        pos = torch.arange(P, device=dev)
        common.sync(dev)
        pre_t.start()
        out = model(input_ids=ids, past_key_values=cache, cache_position=pos,
                    position_ids=pos[None].expand(B, -1), use_cache=True, logits_to_keep=1)
        pre_t.stop()
        logits.append(out.logits[:, -1].float())
        for i in range(n_decode):
            cp = torch.tensor([P + i], device=dev)
            dec_t.start()
            out = model(input_ids=dec_ids[:, i:i + 1], past_key_values=cache, cache_position=cp,
                        position_ids=cp[None].expand(B, -1), use_cache=True)
            dec_t.stop()
            logits.append(out.logits[:, -1].float())
    dec = dec_t.times_ms()
    return dict(logits=torch.stack(logits, 1), prefill_ms=pre_t.total_ms(),
                decode_ms=sum(dec) / max(1, len(dec)))


def kernelized_forwards(model):
    return {id(m): m for m in model.modules() if "forward" in m.__dict__}


def apply_config(model, name, args):
    """Set up one configuration; returns (undo, info)."""
    undo, info = [], {}
    if "kernels" in name:
        from kernels import KernelizeFallback, LocalLayerRepository, Mode, kernelize, use_kernel_mapping

        names = ["RMSNorm"] + {"gelu_pytorch_tanh": ["GeluTanh"], "gelu": ["GeLU"]}.get(args.hidden_act, [])
        devtype = torch.device(args.device).type
        mapping = {n: {devtype: LocalLayerRepository(common.REPO, layer_name=n)} for n in names}
        mode = Mode.INFERENCE | (Mode.TORCH_COMPILE if "compile" in name else Mode.INFERENCE)
        import transformers
        from transformers import activations
        from transformers.models.llama.modeling_llama import LlamaRMSNorm

        marked = common.mark_transformers_layers([
            (LlamaRMSNorm, "RMSNorm"), (getattr(activations, "GELUTanh", None), "GeluTanh"),
            (getattr(activations, "GELUActivation", None), "GeLU")])
        if marked:
            print(f"transformers {transformers.__version__} did not mark {marked} for kernelize "
                  "(kernels version outside its pin); marked with replace_kernel_forward_from_hub")
        before = kernelized_forwards(model)
        import logging

        logging.getLogger("kernels").setLevel(logging.ERROR)  # "no mapping for SiLU / rotary_pos_emb"
        with use_kernel_mapping(mapping, inherit_mapping=False):
            kernelize(model, mode=mode, device=devtype, use_fallback=KernelizeFallback.NO_LAYER)
        added = [m for k, m in kernelized_forwards(model).items() if k not in before]
        counts = {}
        for m in added:
            fn = getattr(m.__dict__["forward"], "__func__", m.__dict__["forward"])
            if getattr(fn, "__module__", None) == getattr(args, "kernel_module", None):  # ours, not SiLU's own
                owner = fn.__qualname__.split(".")[0]
                counts[owner] = counts.get(owner, 0) + 1
        info["kernelized"] = counts
        if not counts:
            raise RuntimeError(f"kernelize put none of this package's layers in: {added[:3]}")

        def unkernelize():
            for m in added:
                del m.forward

        undo.append(unkernelize)
    if "compile" in name:
        common.compile_forward(model, args, undo)

    def undo_all():
        for fn in undo:
            fn()

    return undo_all, info


def main(argv=None):
    args = parse_args(argv)
    try:
        import transformers
    except ImportError:
        raise SystemExit("benchmarks/llama.py needs transformers")
    dev = args.device
    print(f"Llama e2e: device {dev}, dtype {args.dtype}, configs {args.config_list}", flush=True)
    if any("kernels" in c for c in args.config_list):
        # what LocalLayerRepository(REPO) loads in kernelize (torch's own backend, whatever dev
        # is); fails early if the build is missing
        from kernels import get_local_kernel

        args.kernel_module = get_local_kernel(common.REPO).layers.__name__
    t0 = time.perf_counter()
    model = build_model(args)
    n_params = sum(p.numel() for p in model.parameters())
    cfg = model.config
    print(f"built in {time.perf_counter() - t0:.1f}s: {n_params / 1e9:.3f}B params, {cfg.num_hidden_layers} layers, "
          f"hidden {cfg.hidden_size}, heads {cfg.num_attention_heads}/{cfg.num_key_value_heads}, "
          f"vocab {cfg.vocab_size}; prefill {args.prefill_tokens}, decode {args.decode_tokens}", flush=True)
    g = torch.Generator().manual_seed(args.seed + 1)
    ids = torch.randint(0, cfg.vocab_size, (args.batch_size, args.prefill_tokens), generator=g).to(dev)
    dec_ids = torch.randint(0, cfg.vocab_size, (args.batch_size, args.decode_tokens), generator=g).to(dev)

    noise = None
    if args.noise_ref == "fp32":
        print("noise reference (fp32): the baseline again in float32", flush=True)
        model.to(torch.float32)  # exact upcast of the bf16 weights
        try:
            with common.tf32_off():
                noise = run_once(model, make_cache(model, args), args, ids, dec_ids, args.decode_tokens)["logits"]
        finally:
            model.to(args.torch_dtype)
    results, ref = {}, None
    for name in args.config_list:
        if torch.device(dev).type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        cache = make_cache(model, args)
        undo, info = apply_config(model, name, args)
        try:
            tw = time.perf_counter()
            for _ in range(args.warmup_iterations):
                run_once(model, cache, args, ids, dec_ids, min(args.warmup_decode, args.decode_tokens))
            warm_s = time.perf_counter() - tw
            r = run_once(model, cache, args, ids, dec_ids, args.decode_tokens)
        finally:
            undo()
        r.update(info, warmup_s=warm_s)
        if torch.device(dev).type == "cuda":
            r["peak_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
        if name == "baseline":
            ref = r["logits"]
            r["match"] = {"pass": bool(torch.isfinite(ref).all()), "reference": True,
                          "noise": None if noise is None else common.compare(noise, ref, None)["max_abs"],
                          "noise_cos": None if noise is None else common.noise_self_check(ref, noise)}
        else:
            r["match"] = common.compare(r["logits"], ref, noise)
        results[name] = r
        print(f"{name}: prefill {r['prefill_ms']:.2f} ms, decode {r['decode_ms']:.3f} ms/token, "
              f"match {'PASS' if r['match']['pass'] else 'FAIL'}"
              + (f", kernelized {info['kernelized']}" if "kernelized" in info else ""), flush=True)

    header, rows = table(args, results)
    print()
    print(common.markdown_table(header, rows))
    ok = all(r["match"]["pass"] for r in results.values())
    print(f"\nmatch check: {'PASS' if ok else 'FAIL'} ({method_text(args)})")
    data = {"args": {k: v for k, v in vars(args).items() if k not in ("torch_dtype", "kernel_module")},
            "env": common.environment(dev), "params": n_params,
            "results": {k: {kk: vv for kk, vv in v.items() if kk != "logits"} for k, v in results.items()},
            "pass": ok}
    if torch.device(dev).type == "cuda" and not args.tiny and not args.no_results:
        env = data["env"]
        body = "\n".join([
            f"- GPU: {env.get('gpu')} ({env.get('gpu_mem_gib')} GiB); torch {env['torch']}, CUDA {env.get('cuda')}, "
            f"Python {env['python']}, transformers {env.get('transformers')}, kernels {env.get('kernels')}.",
            f"- Model: Llama-3-8B-shaped LlamaForCausalLM, {cfg.num_hidden_layers} layers, random weights "
            f"({n_params / 1e9:.2f}B params), {args.dtype}, hidden_act {args.hidden_act}, SDPA attention, StaticCache.",
            f"- Shapes: batch {args.batch_size}, prefill {args.prefill_tokens} tokens (logits of the last only), then "
            f"{args.decode_tokens} teacher-forced decode steps; {args.warmup_iterations} warm-up(s).",
            "- Method: CUDA events around the prefill forward and each decode forward (mean per token); "
            f"compile = torch.compile of the model forward (mode {args.compile_mode or 'default'}, dynamic=False); "
            f"kernels = kernels.kernelize with LocalLayerRepository layers. Match: {method_text(args)}.",
            f"- Command: `python benchmarks/llama.py {' '.join(sys.argv[1:] if argv is None else argv)}`",
            "", common.markdown_table(header, rows)])
        title = f"{env['date'][:10]} — Llama-3-8B-shaped decoder end to end ({args.layers} layers, {env.get('gpu')})"
        common.write_results("llama", title, body, data, args.results, args.out)
    elif args.out:
        common.write_results("llama", "Llama end to end", common.markdown_table(header, rows), data, None, args.out)
    return data


def method_text(args):
    tail = ("max|Δ| <= the bf16 noise = max|baseline - the baseline in float32 (same bf16-rounded "
            "weights, TF32 off)|" if args.noise_ref == "fp32" else "no noise run")
    return ("last prefill logits + all decode logits vs the baseline's: cosine >= min(0.9999, the "
            f"float32 run's cosine to the baseline) and {tail}")


def table(args, results):
    base = results["baseline"]
    cuda = torch.device(args.device).type == "cuda"
    header = ["configuration", "prefill ms", "decode ms/token", "tokens/s (decode)", "prefill speedup",
              "decode speedup"] + (["peak GiB"] if cuda else []) + ["match vs baseline"]
    rows = []
    for name, r in results.items():
        rows.append([name.replace("+", " + "), f"{r['prefill_ms']:.2f}", f"{r['decode_ms']:.3f}",
                     f"{args.batch_size * 1e3 / r['decode_ms']:.1f}",
                     f"{base['prefill_ms'] / r['prefill_ms']:.3f}x", f"{base['decode_ms'] / r['decode_ms']:.3f}x"]
                    + ([f"{r['peak_gib']:.1f}"] if cuda else []) + [common.match_text(r["match"])])
    return header, rows


if __name__ == "__main__":
    d = main()
    sys.exit(0 if d["pass"] else 1)
