"""Hub-kernel packaging rules: build.toml, forbidden patterns, ABI, metadata, loading.

These tests check what kernel-builder, the Hub and `kernels` require of this package, not
the numerics of the ops (tests/test_rmsnorm.py does that). They mirror the rules of
shared/hooks/before-stop and shared/docs/hub-kernels.md.

The tests that need a built variant look for it where the loader would: in the path that
`LOCAL_KERNELS` maps this repo id to (the Nix ci-test sets it to the build output), and in
<repo>/build. They skip, saying why, when no variant for the running torch exists there;
`bash tools/dev.sh test` and `.ci/run` always build first.

Deliberately self-contained (no tests/util.py), so the packaging checks still run when the
op tests are broken.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python < 3.11: kernels depends on tomli there
    import tomli as tomllib

pytestmark = pytest.mark.kernels_ci

ROOT = Path(__file__).resolve().parent.parent
CONFIG = tomllib.loads((ROOT / "build.toml").read_text())
GENERAL = CONFIG.get("general", {})
NAME = GENERAL.get("name", "")
PYTHON_NAME = NAME.replace("-", "_")
REPO_ID = GENERAL.get("hub", {}).get("repo-id", "")
PACKAGE = ROOT / "torch-ext" / PYTHON_NAME

REQUIRED_CUDA_CAPS = {"7.5", "8.0", "8.6", "8.9", "9.0"}
REQUIRED_METADATA = ("name", "id", "version", "license", "python-depends", "backend")
# The host toolchain (g++ 12 / glibc 2.36) emits this GLIBC 2.32 symbol; the Nix toolchain
# does not. It is the only manylinux_2_28 violation tolerated (shared/docs/environment.md).
ALLOWED_MANYLINUX = {"__libc_single_threaded"}
VARIANT_RE = re.compile(r"torch(\d)(\d+)-(?:cxx11-)?(cpu|cu(\d+))-(x86_64|aarch64)-linux")


# ----------------------------------------------------------------------------- helpers


def kernel_sections() -> dict[str, dict]:
    return CONFIG.get("kernel", {})


def listed_sources() -> list[str]:
    files = list(CONFIG.get("torch", {}).get("src", []))
    for sec in kernel_sections().values():
        files += sec.get("src", [])
    return files


def kernel_source_dirs() -> list[Path]:
    """torch-ext plus every top-level dir holding [kernel.*] sources (and the hook's list)."""
    names = {"torch-ext", "ltx_kernels_cuda", "ltx_kernels_cpu"}
    for sec in kernel_sections().values():
        names |= {Path(f).parts[0] for f in sec.get("src", []) if len(Path(f).parts) > 1}
    return [ROOT / n for n in sorted(names) if (ROOT / n).is_dir()]


def files_under(*dirs: Path) -> list[Path]:
    out = []
    for d in dirs:
        out += [p for p in sorted(d.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    return out


def read_text(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None  # binary
    return data.decode("utf-8", errors="replace")


def repo_files() -> list[Path]:
    """Tracked plus untracked-but-not-ignored files (what a commit would contain)."""
    if shutil.which("git") and (ROOT / ".git").exists():
        proc = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"],
                              capture_output=True, check=True)
        paths = [ROOT / p for p in proc.stdout.decode().split("\0") if p]
        return [p for p in paths if p.is_file()]
    skip = {".git", ".venv", "venv", "build", "result", ".whl", "__pycache__"}
    return [p for p in sorted(ROOT.rglob("*"))
            if p.is_file() and not skip.intersection(p.relative_to(ROOT).parts)]


def grep(regex: str, files, flags=0) -> list[str]:
    pattern = re.compile(regex, flags)
    hits = []
    for path in files:
        text = read_text(path)
        if text is None:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    return hits


def kernel_roots() -> list[Path]:
    """Dirs that may hold variant dirs, like the loader searches them (root, then root/build)."""
    bases = []
    for entry in os.environ.get("LOCAL_KERNELS", "").split(":"):
        repo_id, sep, path = entry.partition("=")
        if sep and repo_id == REPO_ID:
            bases.append(Path(path))
    bases.append(ROOT)
    roots = []
    for base in bases:
        for cand in (base, base / "build"):
            cand = cand.resolve()
            if cand.is_dir() and cand not in roots and any(variants_in(cand)):
                roots.append(cand)
    return roots


def variants_in(root: Path) -> list[Path]:
    return [d for d in sorted(root.iterdir()) if d.is_dir() and (d / "metadata.json").is_file()]


def all_variants() -> list[Path]:
    return [v for root in kernel_roots() for v in variants_in(root)]


def require_variants() -> list[Path]:
    variants = all_variants()
    if not variants:
        pytest.skip("no built variant (no <dir>/metadata.json) in build/ or the LOCAL_KERNELS "
                    f"path for {REPO_ID}: run `python tools/build.py` first")
    return variants


def variant_for_this_torch() -> tuple[Path, Path, str | None]:
    """(root, variant dir, backend override) that `kernels` would load here, or skip.

    The backend override is "cpu" when torch is a CUDA build but only a CPU variant was built
    (kernels would otherwise look for a cu* variant only)."""
    import torch
    from kernels.variants import get_variants_local, resolve_variant, variants_trace_str

    traces = []
    for root in kernel_roots():
        variants = get_variants_local(root)
        for backend in (None, "cpu") if torch.version.cuda else (None,):
            chosen, trace = resolve_variant(variants, backend)
            if chosen is not None:
                return root, root / chosen.variant_str, backend
            traces.append(f"{root} (backend {backend or 'auto'}):\n{variants_trace_str(trace)}")
    pytest.skip(f"no build variant for this torch ({torch.__version__}) in build/ or the "
                f"LOCAL_KERNELS path: run `python tools/build.py` first.\n" + "\n".join(traces))


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LOCAL_KERNELS", None)
    env.update(HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1", **extra)
    return env


# The child process: block the network, load the kernel one way, run rmsnorm, report JSON.
LOAD_CHILD = textwrap.dedent(
    r'''
    import json, socket, sys

    def _no_network(*args, **kwargs):
        raise OSError("network access is blocked in this test")

    socket.socket.connect = _no_network
    socket.socket.connect_ex = _no_network
    socket.create_connection = _no_network

    from pathlib import Path
    import torch
    import kernels

    cfg = json.loads(sys.argv[1])
    kw = {"backend": cfg["backend"]} if cfg["backend"] else {}
    if cfg["mode"] == "local":
        kernel = kernels.get_local_kernel(Path(cfg["path"]), **kw)
    else:
        kernel = kernels.get_kernel(cfg["repo_id"], version=cfg["version"], **kw)

    report = {"file": kernel.__file__, "module": kernel.__name__, "all": list(kernel.__all__),
              "callable": [n for n in kernel.__all__ if callable(getattr(kernel, n, None))],
              "layers": sorted(n for n, v in (vars(kernel.layers) if hasattr(kernel, "layers") else {}).items()
                               if isinstance(v, type) and issubclass(v, torch.nn.Module)
                               and v.__module__ == kernel.layers.__name__),
              "ops": [n for n in ("rms_norm", "rms_norm_out") if hasattr(kernel.ops, n)]}

    cuda_variant = cfg["cuda_variant"]
    device = "cuda" if cuda_variant and torch.cuda.is_available() else "cpu"
    report["device"] = device
    if cuda_variant and device == "cpu":
        # A CUDA variant without a GPU: the import worked; a CPU tensor gets a clear error.
        try:
            kernel.rmsnorm(torch.randn(2, 8))
            report["wrong_device_error"] = None
        except RuntimeError as e:
            report["wrong_device_error"] = str(e)
    else:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(3, 5, 512, generator=gen).to(device, torch.bfloat16)
        w = (1 + 0.1 * torch.randn(512, generator=gen)).to(device, torch.bfloat16)
        xf, wf = x.float(), w.float()
        ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * wf
        y = kernel.rmsnorm(x, w, 1e-6)
        report["dtype"] = str(y.dtype)
        report["shape"] = list(y.shape)
        report["max_rel_err"] = ((y.float() - ref).abs() / (ref.abs() + 1e-3)).max().item()
        x32 = torch.randn(7, 96, generator=gen).to(device)
        ref32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)
        y32 = kernel.rmsnorm(x32, None, 1e-5, semantics="torch")
        report["max_abs_err_fp32"] = (y32 - ref32).abs().max().item()
    print("REPORT " + json.dumps(report))
    '''
)


def run_load_child(tmp_path: Path, mode: str) -> tuple[dict, Path, Path]:
    pytest.importorskip("kernels")
    root, variant, backend = variant_for_this_torch()
    cfg = {"mode": mode, "backend": backend, "repo_id": REPO_ID, "version": GENERAL["version"],
           "path": str(root), "cuda_variant": "-cpu-" not in variant.name}
    extra = {"LOCAL_KERNELS": f"{REPO_ID}={root}"} if mode == "hub" else {}
    script = tmp_path / "load_child.py"
    script.write_text(LOAD_CHILD)
    proc = subprocess.run([sys.executable, str(script), json.dumps(cfg)], cwd=tmp_path,
                          env=child_env(**extra), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"loading ({mode}) failed:\n{proc.stdout}\n{proc.stderr}"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert lines, f"no report from the child:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1][len("REPORT "):]), root, variant


def public_functions() -> list[str]:
    """The package's `__all__`, read statically: `__all__ = [...]` plus any `__all__ += [...]`,
    each a literal list of strings (kernel-builder fill-card reads literals only)."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    names, found = [], False
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
            targets = [node.target]
        else:
            continue
        if not any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            continue
        assert isinstance(node.value, (ast.List, ast.Tuple)), "__all__ must be built from literal lists"
        if isinstance(node, ast.Assign):
            names, found = [], True
        for elt in node.value.elts:
            assert isinstance(elt, ast.Constant) and isinstance(elt.value, str), \
                "__all__ must list string literals (fill-card cannot read anything else)"
            names.append(elt.value)
    if not found:
        pytest.fail(f"{PACKAGE / '__init__.py'} defines no __all__")
    return names


# ----------------------------------------------------------------------------- build.toml


def test_build_toml_parses_with_kernel_builder_parser():
    from kernels._rust import Build

    build = Build.open(ROOT)  # the parser kernel-builder check-config uses; raises ValueError
    assert sorted(str(b) for b in build.general.backends) == ["cpu", "cuda"]


def test_build_toml_general_fields():
    assert NAME == "ltx-kernels"
    assert GENERAL.get("version") == 1
    assert GENERAL.get("edition") == 5
    assert GENERAL.get("license") == "Apache-2.0"
    assert sorted(GENERAL.get("backends", [])) == ["cpu", "cuda"]
    assert REPO_ID == "org/ltx-kernels", "[general.hub] repo-id is needed by fill-card and ci-test"
    assert "torch" in CONFIG, "arch kernels need a [torch] section"
    assert (PACKAGE / "__init__.py").is_file(), f"torch-ext/{PYTHON_NAME}/__init__.py is missing"


def test_build_toml_listed_files_exist():
    missing = [f for f in listed_sources() if not (ROOT / f).is_file()]
    assert not missing, f"build.toml lists files that do not exist: {missing}"
    sections = {"torch": CONFIG.get("torch", {})} | {f"kernel.{n}": s for n, s in kernel_sections().items()}
    dupes = {n: sorted({f for f in s.get("src", []) if s["src"].count(f) > 1}) for n, s in sections.items()}
    dupes = {n: d for n, d in dupes.items() if d}
    assert not dupes, f"files listed twice in one section of build.toml: {dupes}"


def test_build_toml_kernel_sections():
    sections = kernel_sections()
    assert sections, "no [kernel.*] section"
    for name, sec in sections.items():
        assert sec.get("depends") == ["torch"], f"[kernel.{name}] depends = {sec.get('depends')!r}"
        assert sec.get("src"), f"[kernel.{name}] has no src"
        if sec.get("backend") == "cuda":
            caps = set(sec.get("cuda-capabilities", []))
            assert REQUIRED_CUDA_CAPS <= caps, \
                f"[kernel.{name}] cuda-capabilities lacks {sorted(REQUIRED_CUDA_CAPS - caps)}"
    # A listed backend without a [kernel.*] of its own is sent to the noarch builder, which
    # fails for a [torch] project (hub-kernels.md section 1.8).
    used = {sec.get("backend") for sec in sections.values()}
    assert set(GENERAL.get("backends", [])) <= used, \
        f"backends without a [kernel.*]: {sorted(set(GENERAL['backends']) - used)}"


def test_build_toml_lists_every_included_header():
    """The Nix sandbox only receives listed files: every quoted #include must resolve to one.

    Search order as kernel-builder compiles: the including file's dir, torch-ext/, then the
    `include` dirs. registration.h is generated by the builder and not listed."""
    listed = {(ROOT / f).resolve() for f in listed_sources()}
    include_dirs = [ROOT / "torch-ext"] + [ROOT / d for d in CONFIG.get("torch", {}).get("include", [])]
    for sec in kernel_sections().values():
        include_dirs += [ROOT / d for d in sec.get("include", [])]
    problems = []
    for src in sorted(listed):
        if not src.is_file():
            continue
        for lineno, line in enumerate(src.read_text().splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m or m[1] == "registration.h":
                continue
            cands = [(d / m[1]).resolve() for d in [src.parent, *include_dirs]]
            found = next((c for c in cands if c.is_file()), None)
            where = f"{src.relative_to(ROOT)}:{lineno} includes \"{m[1]}\""
            if found is None:
                problems.append(f"{where}, not found relative to the file, torch-ext/ or include dirs")
            elif found not in listed:
                problems.append(f"{where} = {found.relative_to(ROOT)}, not listed in build.toml")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: re.sub(r'(?m)^name = "ltx-kernels"$', 'name = "ltx_kernels"', t), "Invalid kernel name"),
        (lambda t: re.sub(r"(?m)^license = .*\n", "", t), "license"),
    ],
    ids=["underscore-name", "no-license"],
)
def test_invalid_build_toml_is_rejected(tmp_path, edit, message):
    from kernels._rust import Build

    original = (ROOT / "build.toml").read_text()
    edited = edit(original)
    assert edited != original, "the edit did not apply: the test needs updating"
    (tmp_path / "build.toml").write_text(edited)
    with pytest.raises(ValueError, match=message):
        Build.open(tmp_path)


# ----------------------------------------------------------------------------- sources


# (what is wrong, regex, where). The first five are shared/hooks/before-stop's own rules.
# Character classes ([E], [_]) keep this file from matching its own patterns.
SOURCE_RULES = [
    ("pybind11 / torch/extension.h in kernel sources (not ABI3-safe)",
     r"pybind11|PYBIND11|torch/extension\.h|py::", "kernel"),
    ("hard-coded op namespace or module init (use TORCH_LIBRARY_EXPAND / REGISTER_EXTENSION)",
     r"TORCH_LIBRARY\(|TORCH_LIBRARY_FRAGMENT|TORCH_LIBRARY_IMPL|PyInit", "kernel"),
    ("absolute import or hard-coded torch.ops namespace inside torch-ext",
     r"torch\.ops\.ltx|from ltx_kernels[. ]|import ltx_kernels", "torch-ext"),
    ("runtime import other than stdlib + torch inside the kernel package",
     r"^\s*(import|from)\s+(numpy|triton|packaging|einops|diffusers|transformers|kernels)\b", "torch-ext"),
    ("Python-side custom_op binding (ops belong in C++)", r"custom[_]op", "torch-ext"),
    ("PyTorch cpp_extension / inline JIT builds in kernel sources",
     r"torch\.utils\.cpp[_]extension|CUDA[E]xtension|Build[E]xtension|load[_]inline", "kernel"),
    ("hard-coded torch.ops.<namespace> (use `ops` / add_op_namespace_prefix from ._ops)",
     r"torch\.ops\.(?!aten\b)[A-Za-z_]\w*", "torch-ext"),
    ("absolute import of the package (the loader registers it under its build id)",
     r"^\s*(from|import)\s+" + PYTHON_NAME + r"\b", "torch-ext"),
]


@pytest.mark.parametrize("what, regex, where", SOURCE_RULES, ids=[f"rule{i}" for i in range(len(SOURCE_RULES))])
def test_forbidden_patterns_in_kernel_sources(what, regex, where):
    dirs = [ROOT / "torch-ext"] if where == "torch-ext" else kernel_source_dirs()
    hits = grep(regex, files_under(*dirs))
    assert not hits, f"{what}:\n" + "\n".join(hits[:20])


def test_no_cpp_extension_anywhere():
    """The hook's repo-wide rule: no cpp_extension or inline JIT builds in any file but *.md."""
    files = [p for p in repo_files() if p.suffix != ".md"]
    hits = grep(r"torch\.utils\.cpp[_]extension|CUDA[E]xtension|Build[E]xtension|load[_]inline", files)
    named = [str(p.relative_to(ROOT)) for p in files if "cpp_extension" in p.name]
    assert not hits and not named, (
        "PyTorch's cpp_extension builder is not allowed for Hub kernels (nor named in comments or "
        "docstrings of committed files: the before-stop hook greps them):\n" + "\n".join(hits + named))


def test_runtime_imports_are_stdlib_or_torch():
    allowed = set(sys.stdlib_module_names) | {"torch"}
    problems = []
    for py in sorted(PACKAGE.rglob("*.py")):
        rel = py.relative_to(ROOT)
        for node in ast.walk(ast.parse(py.read_text(), str(py))):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                mods = [node.module or ""]
            elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str)
                  and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                       or (isinstance(node.func, ast.Name) and node.func.id == "__import__"))):
                mods = [node.args[0].value]
            else:
                continue
            for mod in mods:
                if mod.split(".")[0] not in allowed:
                    problems.append(f"{rel}:{node.lineno}: imports {mod}")
    assert not problems, ("kernel package imports must be stdlib, torch or relative:\n"
                          + "\n".join(problems))


def test_no_generated_files_in_source_tree():
    generated = ["torch-ext/registration.h", f"torch-ext/{PYTHON_NAME}/_ops.py", "setup.py",
                 "pyproject.toml"]
    present = [f for f in generated if (ROOT / f).exists()]
    assert not present, (
        f"generated by kernel-builder / tools/build.py, must not be in the source tree: {present} "
        "(a committed registration.h or _ops.py makes the Nix create-pyproject fail)")


def test_gitignore_covers_generated_files():
    if not (shutil.which("git") and (ROOT / ".git").exists()):
        pytest.skip("not a git checkout (e.g. the Nix source set): nothing to ignore")
    paths = ["build/x", "torch-ext/registration.h", f"torch-ext/{PYTHON_NAME}/_ops.py"]
    proc = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", *paths],
                          capture_output=True, text=True)
    ignored = set(proc.stdout.split())
    assert ignored == set(paths), f".gitignore does not cover {sorted(set(paths) - ignored)}"


def test_all_is_a_literal_list_of_defined_functions():
    names = public_functions()
    assert names, "__all__ is empty"
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    bound = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Assign):
            bound |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    assert not set(names) - bound, f"__all__ names not bound in __init__.py: {set(names) - bound}"
    if "layers" in names:
        assert (PACKAGE / "layers.py").is_file() or (PACKAGE / "layers" / "__init__.py").is_file()


def test_card_lists_the_public_api():
    card = ROOT / "CARD.md"
    if not card.is_file() and not (ROOT / ".git").exists():
        pytest.skip("CARD.md is not part of this source set (Nix)")
    text = card.read_text()
    front = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert front, "CARD.md needs YAML front matter"
    assert re.search(r"(?m)^library_name:\s*kernels\s*$", front[1])
    assert re.search(rf"(?m)^license:\s*{re.escape(GENERAL['license'].lower())}\s*$", front[1])
    assert re.search(rf'get_kernel\("{re.escape(REPO_ID)}", version={GENERAL["version"]}\b', text), \
        "CARD.md needs the usage line get_kernel(<repo-id>, version=<version>)"
    missing = [f for f in public_functions()
               if f != "layers" and not re.search(rf"`{re.escape(f)}[`(]", text)]
    assert not missing, f"CARD.md does not list {missing} from __all__"


# ----------------------------------------------------------------------------- built variants


def test_variant_names_and_metadata():
    from kernels._rust import Metadata

    required_depends = list(GENERAL.get("python-depends", []))
    for variant in require_variants():
        m = VARIANT_RE.fullmatch(variant.name)
        assert m, f"{variant.name} is not a torch<MAJ><MIN>-cxx11-<cpu|cuXY>-<arch>-linux name"
        backend = "cpu" if m[3] == "cpu" else "cuda"
        raw = json.loads((variant / "metadata.json").read_text())
        missing = [k for k in REQUIRED_METADATA if k not in raw]
        assert not missing, f"{variant.name}/metadata.json lacks {missing}"
        meta = Metadata.read_from_file(variant / "metadata.json")  # the loader's own parser
        assert meta.id == raw["id"]
        assert raw["name"] == NAME and raw["version"] == GENERAL["version"]
        assert raw["license"].lower() == GENERAL["license"].lower()
        extra = GENERAL.get(backend, {}).get("python-depends", [])
        assert sorted(raw["python-depends"]) == sorted(required_depends + extra)
        assert raw["backend"]["type"] == backend, f"{variant.name}: backend {raw['backend']}"
        assert re.fullmatch(rf"_{PYTHON_NAME}_{backend}_\w+", raw["id"]), raw["id"]
        if backend == "cuda":
            archs = {a.replace("+PTX", "") for a in raw["backend"].get("archs", [])}
            # A quick `--arch native` build lists only the local GPU's capability, honestly;
            # a full build (build.toml's list) must cover every required capability.
            assert archs, f"{variant.name}: no archs in metadata.json"
            if len(archs) > 1:
                assert REQUIRED_CUDA_CAPS <= archs, f"{variant.name}: archs {sorted(archs)}"

        libs = sorted(p.name for p in variant.glob("*.so"))
        assert libs == [f"{raw['id']}.abi3.so"], \
            f"{variant.name}: expected exactly {raw['id']}.abi3.so (id = .so stem), found {libs}"
        ops_py = (variant / "_ops.py").read_text()
        namespaces = set(re.findall(r"torch\.ops\.(\w+)", ops_py))
        namespaces |= set(re.findall(r"from \. import (\w+)", ops_py))
        namespaces |= set(re.findall(r"(\w+)::", ops_py))
        assert namespaces == {raw["id"]}, f"{variant.name}/_ops.py namespaces {namespaces} != id"


def test_variants_match_the_sources():
    """Every .py of torch-ext/<pkg> is in each variant, unchanged (a stale variant would be uploaded)."""
    problems = []
    for variant in require_variants():
        for py in sorted(PACKAGE.rglob("*.py")):
            rel = py.relative_to(PACKAGE)
            if "__pycache__" in rel.parts:
                continue
            shipped = variant / rel
            if not shipped.is_file():
                problems.append(f"{variant.name}: {rel} missing")
            elif shipped.read_bytes() != py.read_bytes():
                problems.append(f"{variant.name}: {rel} differs from torch-ext (stale build?)")
        for py in sorted(variant.rglob("*.py")):
            rel = py.relative_to(variant)
            if rel != Path("_ops.py") and not (PACKAGE / rel).is_file():
                problems.append(f"{variant.name}: {rel} has no source in torch-ext (stale file)")
    assert not problems, "rebuild with `python tools/build.py`:\n" + "\n".join(problems)


def test_shared_objects_pass_abi_checks():
    abi = pytest.importorskip("kernel_abi_check", reason="kernel-abi-check is not installed")
    libs = [so for v in require_variants() for so in sorted(v.glob("*.so"))]
    assert libs, "variants without a .so"
    problems = []
    for so in libs:
        obj = abi.ObjectFile(str(so))
        for v in obj.check_python_abi("3.9"):
            problems.append(f"{so.parent.name}/{so.name}: Python ABI3 3.9: {v}")
        for v in obj.check_manylinux("manylinux_2_28"):
            if v.name not in ALLOWED_MANYLINUX:
                problems.append(f"{so.parent.name}/{so.name}: manylinux_2_28: {v.name}@{v.dep}_{v.version}")
    assert not problems, "\n".join(problems)


def test_shared_objects_have_no_rpath():
    """An rpath into one venv silently loads that venv's torch into another process."""
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf not found")
    for so in (so for v in require_variants() for so in v.glob("*.so")):
        out = subprocess.run([readelf, "-d", str(so)], capture_output=True, text=True, check=True).stdout
        assert not re.search(r"\((RPATH|RUNPATH)\)", out), f"{so} has an rpath/runpath:\n{out}"


def check_load_report(report: dict, variant: Path):
    meta = json.loads((variant / "metadata.json").read_text())
    assert Path(report["file"]).resolve() == (variant / "__init__.py").resolve(), \
        f"loaded {report['file']}, expected the variant {variant}"
    assert report["module"] == meta["id"]
    assert report["all"] == public_functions()
    # Everything in __all__ is a function, except the `layers` module (kernelize's layers).
    assert report["callable"] == [n for n in report["all"] if n != "layers"]
    if "layers" in report["all"]:
        assert report["layers"], "__all__ lists `layers`, but it defines no nn.Module layer"
    assert report["ops"] == ["rms_norm", "rms_norm_out"]
    if "wrong_device_error" in report:
        err = report["wrong_device_error"]
        assert err and "variant" in err, f"a CPU tensor on the CUDA variant gave: {err!r}"
        return
    assert report["dtype"] == "torch.bfloat16" and report["shape"] == [3, 5, 512]
    assert report["max_rel_err"] < 2e-2, report
    assert report["max_abs_err_fp32"] < 1e-5, report


def test_get_local_kernel_offline(tmp_path):
    """kernels.get_local_kernel(<repo>/build) in a fresh interpreter with sockets blocked."""
    report, _, variant = run_load_child(tmp_path, "local")
    check_load_report(report, variant)


def test_get_kernel_through_local_kernels_offline(tmp_path):
    """LOCAL_KERNELS=<repo-id>=<repo> + get_kernel(repo-id, version=N), sockets blocked."""
    report, _, variant = run_load_child(tmp_path, "hub")
    check_load_report(report, variant)
