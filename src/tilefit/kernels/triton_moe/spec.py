"""How the compiler oracle sees our kernel: the launch arguments of one representative call, so that
the oracle compiles the same specialisation a real launch would (unit strides become constexprs,
sizes that are multiples of 16 get divisibility hints).

The representative call is gemm1 of GLM-5 under EP8 (N = 4096, K = 6144, 256 tokens x top-8); the
`shape` tests check that other shapes and gemm2 compile to the same shared memory. To precompile
exactly what a launch will run (Triton's cache then serves the launch), pass the real N, K, E and
topk; the token count does not matter (num_valid is not specialised, num_padded is always a
multiple of BLOCK_SIZE_M), nor does GROUP_SIZE_M (a runtime argument, not specialised either).
"""

from __future__ import annotations

from typing import Any

from tilefit.kernels.triton_moe.config import FP8_BLOCK, MoEConfig, canonical_dtype

# Triton's names for the element types.
TRITON_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8e4nv", "fp8-block": "fp8e4nv"}

REPRESENTATIVE = {"N": 4096, "K": 6144, "E": 32, "tokens": 256, "topk": 8}


def oracle_args(config: MoEConfig, dtype: str, *, gemm: str = "gemm1",
                shape: dict[str, int] | None = None,
                row_scale: bool = False, swap_ab: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """(args, constexprs) for `compile_kernel(fused_moe_kernel, ...)` of one launch; row_scale:
    fp8-block weight scales applied per row where the tile's columns share one (SGLang's form);
    swap_ab: each step computed as B^T A^T (the engines' sm90 fp8 path for narrow row blocks)."""
    from tilefit.oracles.triton_compile import Pointer

    dtype = canonical_dtype(dtype)
    s = {**REPRESENTATIVE, **(shape or {})}
    n, k, e, topk = s["N"], s["K"], s["E"], s["topk"]
    rows = s["tokens"] * topk
    a_rows_per_token = topk if gemm == "gemm1" else 1
    # Per-tensor fp8 is the unscaled loop on e4m3 tiles: vLLM's fused_moe_kernel (0.11.0-0.33.0)
    # multiplies the fp32 accumulator by its two scalar scales after the K loop, which adds no
    # pipelined loads. fp8-block loads a scale per 128-wide K group inside the loop.
    scaled = dtype == "fp8-block"
    elem = Pointer(TRITON_DTYPE[dtype])
    out = Pointer("bf16" if dtype.startswith("fp8") else TRITON_DTYPE[dtype])
    f32, i32 = Pointer("fp32"), Pointer("i32")
    kg, ng = -(-k // FP8_BLOCK), -(-n // FP8_BLOCK)
    padded = rows + e * (config.block_m - 1)
    args = dict(
        a_ptr=elem, b_ptr=elem, c_ptr=out, a_scale_ptr=f32, b_scale_ptr=f32,
        topk_weights_ptr=f32, sorted_ids_ptr=i32, expert_ids_ptr=i32,
        N=n, K=k, num_padded=padded - padded % config.block_m, num_valid=rows,
        GROUP_SIZE_M=config.group_m,
        stride_am=k, stride_ak=1, stride_be=n * k, stride_bn=k, stride_bk=1,
        stride_cm=n, stride_cn=1,
        stride_asm=kg if scaled else 0, stride_ask=1 if scaled else 0,
        stride_bse=ng * kg if scaled else 0, stride_bsn=kg if scaled else 0,
        stride_bsk=1 if scaled else 0,
    )
    constexprs = dict(
        A_ROWS_PER_TOKEN=a_rows_per_token, MUL_ROUTED_WEIGHT=gemm == "gemm2",
        BLOCK_SCALED=scaled, GROUP_K=FP8_BLOCK, GROUP_N=FP8_BLOCK, ROW_SCALE=row_scale and scaled,
        SWAP_AB=swap_ab,
        BLOCK_SIZE_M=config.block_m, BLOCK_SIZE_N=config.block_n, BLOCK_SIZE_K=config.block_k,
    )
    return args, constexprs


def compile_config(config: MoEConfig, cc: int, dtype: str, *, gemm: str = "gemm1",
                   shape: dict[str, int] | None = None, use_cache: bool = True,
                   full: bool = False, row_scale: bool = False, swap_ab: bool = False):
    """The live oracle for one config: a CompileResult (shared bytes and metadata)."""
    from tilefit.oracles.triton_compile import compile_kernel, require_compiler

    require_compiler()  # MissingDependency (with the install hint) or interpreter mode, early
    from tilefit.kernels.triton_moe.kernel import fused_moe_kernel

    args, constexprs = oracle_args(config, dtype, gemm=gemm, shape=shape, row_scale=row_scale,
                                    swap_ab=swap_ab)
    return compile_kernel(fused_moe_kernel, cc, args=args, constexprs=constexprs,
                          num_warps=config.num_warps, num_stages=config.num_stages,
                          use_cache=use_cache, full=full)
