#!/usr/bin/env python3
"""Load the local build the way users load the Hub kernel and run its doctor().

    python tools/doctor.py [--backend cpu|cuda] [--device cuda:1] [--json]

Uses kernels.get_kernel("org/ltx-kernels", version=1) with LOCAL_KERNELS pointing at
this checkout (set LOCAL_KERNELS yourself to test another build). Prints the variant
(metadata id, backend, archs), torch / CUDA versions, the device and a pass/fail
self-test of every public op; exits 1 if any op failed (2 if loading failed).
"""
import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPO_ID = "org/ltx-kernels"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["cpu", "cuda"], help="variant to load (default: kernels' choice)")
    ap.add_argument("--device", help="device to self-test on (default: GPU for a CUDA variant, else cpu)")
    ap.add_argument("--json", action="store_true", help="print the summary dict as JSON at the end")
    args = ap.parse_args(argv)
    os.environ.setdefault("LOCAL_KERNELS", f"{REPO_ID}={ROOT}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import kernels

        kwargs = {"backend": args.backend} if args.backend else {}
        kernel = kernels.get_kernel(REPO_ID, version=1, **kwargs)
    except Exception as e:
        print(f"could not load {REPO_ID} from LOCAL_KERNELS={os.environ['LOCAL_KERNELS']}: "
              f"{type(e).__name__}: {e}\n(build it first: python tools/build.py)", file=sys.stderr)
        return 2
    summary = kernel.doctor(device=args.device)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
