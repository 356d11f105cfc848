"""The developer tools' pure parts (no GPU, no CUDA toolkit needed)."""

import importlib.util

import pytest

from .util import REPO

pytestmark = pytest.mark.kernels_ci


def load_tool(name):
    spec = importlib.util.spec_from_file_location(f"ltx_tool_{name}", REPO / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# Two functions as `cuobjdump -sass` prints them (abridged).
SASS = """
	code for sm_90
		Function : _Z3fooPf
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                       /* 0x00000a00ff017b82 */
        /*0010*/                   F2FP.BF16.F32.PACK_AB R2, R3, R4 ;          /* 0x000000040302723e */
        /*0020*/              @!P0 F2FP.BF16.F32.PACK_AB R5, R6, R7 ;          /* 0x000000070605723e */
        /*0030*/               @P1 EXIT ;                                      /* 0x000000000000094d */
		..........


		Function : _Z3barv
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   IMAD.U32 R0, RZ, RZ, UR4 ;                  /* 0x000000ffff007e24 */
        /*0010*/                   EXIT ;                                      /* 0x000000000000794d */
		..........
"""


def test_sass_mix_parses_functions_and_opcodes():
    sass_mix = load_tool("sass_mix")
    funcs = sass_mix.split_functions(SASS)
    assert list(funcs) == ["_Z3fooPf", "_Z3barv"]
    assert sass_mix.opcodes(funcs["_Z3fooPf"], 1) == ["LDC", "F2FP.BF16", "F2FP.BF16", "EXIT"]
    assert sass_mix.opcodes(funcs["_Z3fooPf"], 0) == ["LDC", "F2FP", "F2FP", "EXIT"]
    assert sass_mix.opcodes(funcs["_Z3barv"], 2) == ["IMAD.U32", "EXIT"]
