"""Triton compiler oracle: compile any @triton.jit function for any CUDA target on a machine with no
GPU and report the shared memory (and the rest of the metadata) the compiler assigns.

Arguments are specialised the way Triton's launcher specialises them (ints equal to 1 become
constexprs, multiples of 16 and 16-byte-aligned pointers get divisibility hints, except where the
kernel's @triton.jit says do_not_specialize; annotated arguments keep their annotated type), so
the figure is the one a real launch would check and the compile lands in Triton's cache under the
launch's key. Tuple arguments are refused. Results are cached on disk as JSON, keyed by the kernel's source
hash, the Triton version, the target and the full argument specialisation + options.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tilefit._io import write_text_atomic
from tilefit.errors import MissingDependency, UsageError
from tilefit.settings import settings

INSTALL_HINT = "pip install 'tilefit[triton]'"


@dataclass(frozen=True, slots=True)
class Pointer:
    """A tensor argument for the oracle: only its element type matters (e.g. 'bf16', 'fp8e4nv')."""

    dtype: str
    aligned: bool = True  # data_ptr % 16 == 0, as torch allocations are


@dataclass(frozen=True, slots=True)
class CompileResult:
    """What the compiler reported for one kernel specialisation on one target."""

    shared: int  # bytes of shared memory the launch requests
    target: str  # "cuda:120"
    triton_version: str
    num_warps: int
    num_stages: int
    seconds: float  # compile wall time (0.0 when served from the cache)
    cached: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)  # other scalar metadata fields


def triton_version() -> str:
    try:
        import triton
    except ImportError:
        raise MissingDependency(f"the Triton compiler oracle needs triton; {INSTALL_HINT}") from None
    return triton.__version__


def require_compiler() -> str:
    """Triton's version, after checking that real compilation is possible in this process.

    Call it before importing a module with @triton.jit kernels: under TRITON_INTERPRET the
    decorator yields interpreter objects, which would then stay cached in that module.
    """
    version = triton_version()
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise UsageError("TRITON_INTERPRET is set: the compiler oracle needs it unset")
    return version


def cache_dir() -> Path:
    """$TILEFIT_CACHE_DIR/triton, else ~/.cache/tilefit/triton."""
    return settings().cache_dir / "triton"


def _scalar(value: Any, specialise: bool, align: bool) -> tuple[str, Any] | None:
    """(type, descriptor) of a bool, int, float or None argument as Triton 3.6's launcher makes
    them (native_specialize_impl, held equal by tests/test_oracle_launch_key.py); None for any
    other value. Here because Triton's native function imports torch at its first call, which a
    compile worker otherwise never needs: ~1 s and ~200 MB per process on the 2-core machine; on
    the H200 host 16 compile workers' warm-ups, importing it at once, took 5.6-6.9 s on average
    (session 8 traces)."""
    if value is None:
        return "constexpr", None
    if isinstance(value, bool):
        return "u1", None
    if isinstance(value, float):
        return "fp32", None
    if not isinstance(value, int):
        return None
    kind = "i32" if -2**31 <= value < 2**31 else "u64" if value >= 2**63 else "i64"
    if not specialise:
        return kind, None
    if value == 1:
        return "constexpr", 1
    return kind, "D" if align and value % 16 == 0 else ""


def _specialise(fn: Any, args: dict[str, Any], constexprs: dict[str, Any]):
    """Signature, constexprs and attrs as Triton's launcher builds them for these values
    (Triton 3.6: runtime/jit.py create_function_from_signature, then JITFunction._pack_args),
    so the compile has the cache key and the code of the launch's."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    names = list(fn.arg_names)
    unknown = sorted((set(args) | set(constexprs)) - set(names))
    missing = [n for n in names if n not in args and n not in constexprs]
    if unknown or missing:
        raise UsageError(f"kernel {fn.__name__}: unknown arguments {unknown}, missing {missing}")
    signature: dict[str, str] = {}
    consts: dict[str, Any] = {}
    attrs: dict[tuple[int, ...], list] = {}
    for i, name in enumerate(names):
        if name in constexprs:
            signature[name], consts[name] = "constexpr", constexprs[name]
            continue
        value = args[name]
        param = fn.params[i]  # @triton.jit(do_not_specialize=..., do_not_specialize_on_alignment=...)
        specialise, align = not param.do_not_specialize, not param.do_not_specialize_on_alignment
        if isinstance(value, tuple):
            raise UsageError(f"kernel {fn.__name__}: argument {name} is a tuple; the oracle "
                             f"specialises scalars and pointers only")
        if isinstance(value, Pointer):  # a tensor: divisibility of its address
            kind = "*" + value.dtype
            desc = None if not specialise else ("D" if value.aligned and align else "")
        elif (scalar := _scalar(value, specialise, align)) is not None:
            kind, desc = scalar
        else:
            kind, desc = native_specialize_impl(BaseBackend, value, bool(param.is_const),
                                                specialise, align)
        annotation = param.annotation_type  # `n: tl.int64` types the argument whatever its value
        if isinstance(annotation, str) and annotation:
            unspecialised = annotation == "u1" or annotation[:2] in ("fp", "bf")
            kind, desc = annotation, (None if unspecialised or not specialise else desc)
        signature[name] = kind
        if kind == "constexpr":
            consts[name] = desc
            continue
        # An argument specialised on that finds nothing (an int not divisible by 16, a pointer
        # not 16-byte aligned) still has its entry, an empty one; Triton's cache key hashes the
        # attrs' text, so leaving it out made another key than the launch's, and the GPU worker
        # compiled again (session 8: TP8 fp8-block gemm2, K/128 = 2 in two scale strides).
        if isinstance(desc, str):
            attrs[(i,)] = BaseBackend.parse_attr(desc)
    return signature, consts, attrs


def _cache_key(fn: Any, cc: int, signature, consts, attrs, options: dict[str, Any]) -> str:
    parts = {
        "source": fn.cache_key,  # hash of the source and the jit functions it calls
        "triton": triton_version(),
        "target": f"cuda:{cc}:32",
        "signature": signature,
        "constexprs": {k: repr(v) for k, v in consts.items()},
        "attrs": {str(k): v for k, v in sorted(attrs.items())},
        "options": options,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


class _SharedFound(Exception):
    def __init__(self, shared: int):
        super().__init__(shared)
        self.shared = shared


def _stop_after_smem_allocation(backend, stages, options, language, capability) -> None:
    """Stages hook: run make_llir's passes up to shared-memory allocation, then stop.

    The allocation pass sets the module's `ttg.shared`, which is what make_llir copies into
    metadata.shared; the LLVM, PTX and cubin stages (most of the time) do not change it.
    """
    from triton._C.libtriton import ir, nvidia, passes
    from triton.backends.nvidia.compiler import get_ptx_version_from_options

    def shared_only(mod, metadata):
        ptx_version = get_ptx_version_from_options(options, backend.target.arch)
        pm = ir.pass_manager(mod.context)
        passes.ttgpuir.add_combine_tensor_select_and_if(pm)
        passes.ttgpuir.add_allocate_warp_groups(pm)
        passes.convert.add_scf_to_cf(pm)
        passes.gluon.add_inliner(pm)
        nvidia.passes.ttgpuir.add_allocate_shared_memory_nv(pm, capability, ptx_version)
        pm.run(mod, "tilefit_smem")
        raise _SharedFound(int(mod.get_int_attr("ttg.shared")))

    stages["llir"] = shared_only
    for later in ("ptx", "cubin"):
        stages.pop(later, None)


def _compile_shared_only(src, target, options) -> int:
    import triton
    from triton import knobs

    previous = knobs.runtime.add_stages_inspection_hook
    knobs.runtime.add_stages_inspection_hook = _stop_after_smem_allocation
    try:
        compiled = triton.compile(src, target=target, options=options)
    except _SharedFound as found:
        return found.shared
    finally:
        knobs.runtime.add_stages_inspection_hook = previous
    return int(compiled.metadata.shared)  # served whole from Triton's own cache


def compile_kernel(fn: Any, cc: int, *, args: dict[str, Any], constexprs: dict[str, Any],
                   num_warps: int, num_stages: int, use_cache: bool = True,
                   cache: Path | None = None, full: bool = False) -> CompileResult:
    """Compile `fn` for GPUTarget('cuda', cc, 32) and return its shared memory and metadata.

    `args` holds every runtime argument (a Pointer for tensors, an int/float otherwise, with a value
    typical of a real launch); `constexprs` the tl.constexpr arguments. By default compilation stops
    once shared memory is allocated (`metadata` then holds only that); full=True runs the whole
    pipeline to a cubin (seconds to tens of seconds for large tiles) and returns all metadata.
    """
    version = require_compiler()
    if not hasattr(fn, "arg_names") or not hasattr(fn, "cache_key"):
        raise UsageError(f"{fn!r} is not a compiled @triton.jit function (interpreter mode?)")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature, consts, attrs = _specialise(fn, args, constexprs)
    options = {"num_warps": int(num_warps), "num_stages": int(num_stages)}
    key = _cache_key(fn, cc, signature, consts, attrs, {**options, "full": bool(full)})
    path = (cache or cache_dir()) / f"{key}.json"
    if use_cache and path.exists():
        try:
            data = json.loads(path.read_text())
            return CompileResult(**{**data, "seconds": 0.0, "cached": True})
        except (ValueError, TypeError):
            pass  # a damaged entry is recompiled and rewritten
    src = ASTSource(fn, signature, consts, attrs)
    target = GPUTarget("cuda", int(cc), 32)
    t0 = time.perf_counter()
    if full:
        compiled = triton.compile(src, target=target, options=options)
        md = (compiled.metadata._asdict() if hasattr(compiled.metadata, "_asdict")
              else dict(vars(compiled.metadata)))
    else:
        md = {"shared": _compile_shared_only(src, target, options), "stopped_after": "smem-alloc"}
    seconds = time.perf_counter() - t0
    scalars = {k: v for k, v in md.items()
               if isinstance(v, (int, float, str, bool)) and k not in ("shared", "hash")}
    result = CompileResult(shared=int(md["shared"]), target=f"cuda:{cc}", triton_version=version,
                           num_warps=int(num_warps), num_stages=int(num_stages), seconds=seconds,
                           metadata=scalars)
    if use_cache:
        write_text_atomic(path, json.dumps(asdict(result), sort_keys=True))
    return result
