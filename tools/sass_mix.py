"""Instruction mix of the compiled kernels in a built variant (needs cuobjdump).

    python tools/sass_mix.py build/<variant>/_ltx_kernels_*.so --match adaln_kernel

For each kernel whose demangled name matches --match (a regex): the SASS instruction count,
the opcodes by frequency (predication stripped, modifiers kept up to --depth dots), and the
register / shared / local (spill) usage from `cuobjdump -res-usage`. --dump FILE writes the
matching kernels' full SASS. Used for the speed issue's notes (benchmarks/NOTES.md).
"""

import argparse
import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build import demangle  # noqa: E402  (c++filt over a set of names, tools/build.py)


def run(args):
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def split_functions(sass: str) -> dict[str, str]:
    """`cuobjdump -sass` text → {mangled function name: its SASS body}."""
    blocks = re.split(r"\n\s*Function : (\S+)\n", sass)
    return {blocks[i]: blocks[i + 1] for i in range(1, len(blocks) - 1, 2)}


def opcodes(body: str, depth: int) -> list[str]:
    """The opcodes of one function's SASS, predication stripped, `depth` modifiers kept."""
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", body)
    return [".".join(o.split(".")[: depth + 1]) for o in ops]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("so")
    ap.add_argument("--match", default=".")
    ap.add_argument("--depth", type=int, default=2, help="opcode modifiers kept (F2FP.BF16 = 1)")
    ap.add_argument("--top", type=int, default=24)
    ap.add_argument("--dump", help="write the matching kernels' SASS here")
    args = ap.parse_args(argv)
    cuobjdump = shutil.which("cuobjdump")
    if not cuobjdump:
        print("cuobjdump not found", file=sys.stderr)
        return 1
    sass = run([cuobjdump, "-sass", args.so])
    res = run([cuobjdump, "-res-usage", args.so])
    usage = {}
    for m in re.finditer(r"Function (\S+):\s*\n\s*(REG:\d+ STACK:\d+ SHARED:\d+ LOCAL:\d+[^\n]*)", res):
        usage[m.group(1)] = m.group(2)
    funcs = split_functions(sass)
    names = demangle(set(funcs))
    pat = re.compile(args.match)
    dump = open(args.dump, "w") if args.dump else None
    for mangled, body in funcs.items():
        name = names.get(mangled, mangled)
        if not pat.search(name):
            continue
        cut = opcodes(body, args.depth)
        mix = collections.Counter(cut).most_common(args.top)
        print(f"== {name}\n   {usage.get(mangled, '')}  instructions: {len(cut)}")
        print("   " + ", ".join(f"{op} {n}" for op, n in mix))
        if dump:
            dump.write(f"== {name}\n{body}\n")
    if dump:
        dump.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
