"""Triton compiler oracle: compile any @triton.jit function for any CUDA target on a machine with no
GPU and report the shared memory (and the rest of the metadata) the compiler assigns.

Arguments are specialised the way Triton's launcher specialises them (ints equal to 1 become
constexprs, multiples of 16 and 16-byte-aligned pointers get divisibility hints), so the figure is
the one a real launch would check. Results are cached on disk as JSON, keyed by the kernel's source
hash, the Triton version, the target and the full argument specialisation + options.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tilefit.errors import MissingDependency, UsageError

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


def cache_dir() -> Path:
    """$TILEFIT_CACHE_DIR/triton, else ~/.cache/tilefit/triton."""
    root = os.environ.get("TILEFIT_CACHE_DIR") or os.path.join(Path.home(), ".cache", "tilefit")
    return Path(root) / "triton"


def _specialise(fn: Any, args: dict[str, Any], constexprs: dict[str, Any]):
    """Signature, constexprs and attrs as Triton's launcher would build them for these values."""
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
        if isinstance(value, Pointer):
            signature[name] = "*" + value.dtype
            desc = "D" if value.aligned else ""
        else:
            kind, desc = native_specialize_impl(BaseBackend, value, False, True, True)
            signature[name] = kind
            if kind == "constexpr":
                consts[name] = desc
                continue
        if desc:
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


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def compile_kernel(fn: Any, cc: int, *, args: dict[str, Any], constexprs: dict[str, Any],
                   num_warps: int, num_stages: int, use_cache: bool = True,
                   cache: Path | None = None) -> CompileResult:
    """Compile `fn` for GPUTarget('cuda', cc, 32) and return its shared memory and metadata.

    `args` holds every runtime argument (a Pointer for tensors, an int/float otherwise, with a value
    typical of a real launch); `constexprs` the tl.constexpr arguments.
    """
    version = triton_version()
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise UsageError("TRITON_INTERPRET is set: the compiler oracle needs it unset")
    if not hasattr(fn, "arg_names") or not hasattr(fn, "cache_key"):
        raise UsageError(f"{fn!r} is not a compiled @triton.jit function (interpreter mode?)")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature, consts, attrs = _specialise(fn, args, constexprs)
    options = {"num_warps": int(num_warps), "num_stages": int(num_stages)}
    key = _cache_key(fn, cc, signature, consts, attrs, options)
    path = (cache or cache_dir()) / f"{key}.json"
    if use_cache and path.exists():
        try:
            data = json.loads(path.read_text())
            return CompileResult(**{**data, "seconds": 0.0, "cached": True})
        except (ValueError, TypeError):
            pass  # a damaged entry is recompiled and rewritten
    t0 = time.perf_counter()
    compiled = triton.compile(ASTSource(fn, signature, consts, attrs),
                              target=GPUTarget("cuda", int(cc), 32), options=options)
    seconds = time.perf_counter() - t0
    md = compiled.metadata._asdict() if hasattr(compiled.metadata, "_asdict") else vars(compiled.metadata)
    scalars = {k: v for k, v in md.items()
               if isinstance(v, (int, float, str, bool)) and k not in ("shared", "hash")}
    result = CompileResult(shared=int(md["shared"]), target=f"cuda:{cc}", triton_version=version,
                           num_warps=int(num_warps), num_stages=int(num_stages), seconds=seconds,
                           metadata=scalars)
    if use_cache:
        _write_atomic(path, json.dumps(asdict(result), sort_keys=True))
    return result
