"""Runs the `kernels` CLI (e.g. `kernels benchmark ./`) on the GPU machine.

The kernels 0.17.2 CLI imports sigstore at start-up for `kernels verify-signature` only; the
device has no network and .whl/ does not carry sigstore's dependency tree, so where sigstore
is missing, empty stand-in modules let the other subcommands run. Elsewhere (CI, users) the
real package is imported and this changes nothing.

    python3 tools/kernels_cli_offline.py benchmark ./ --iterations 20 --warmup 3
"""

import importlib.util
import sys
import types


def stub_sigstore():
    names = {
        "sigstore": {},
        "sigstore.errors": {"VerificationError": type("VerificationError", (Exception,), {})},
        "sigstore.models": {"Bundle": object, "InvalidBundle": type("InvalidBundle", (Exception,), {})},
        "sigstore.verify": {"Verifier": object},
        "sigstore.verify.policy": {"VerificationPolicy": object},
    }
    for name, attrs in names.items():
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod
    sys.modules["sigstore.verify"].policy = sys.modules["sigstore.verify.policy"]


if __name__ == "__main__":
    if importlib.util.find_spec("sigstore") is None:
        stub_sigstore()
    from kernels.cli import main

    sys.argv = ["kernels"] + sys.argv[1:]
    main()
