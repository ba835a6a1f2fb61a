"""Build every C++ kernel of one graph into one shared library, cached on disk; load it.

    kernels = compile_graph_kernels(group_kernels)     # {kernel name: CppKernel}
    kernels["k0"](in_a, in_b, out)                     # torch CPU tensors, inputs then outputs

The library's file name is the hash of (source, compiler version, flags, CPU), under
`$CHERENKOV_CACHE_DIR/cpp/` (default `~/.cache/cherenkov/cpp/`), so a second run of the same
graph compiles nothing. The flags come from a one-time probe of the compiler on this CPU:
`-O3 -march=native -fopenmp`, dropping what the compiler refuses. `-ffp-contract=off` keeps
FMA contraction from making results depend on fusion; `-fwrapv` gives integers PyTorch's
wrapping overflow. A missing or failing compiler raises `CppBuildError`, on which the caller
runs the graph in eager.
"""
from __future__ import annotations

import ctypes
import hashlib
import itertools
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from cherenkov.codegen.cpp_ops import PRELUDE, storage_type
from cherenkov.codegen.cpp_renderer import render_cpp
from cherenkov.codegen.kernel_ir import Buffer, Kernel
from cherenkov.ir.graph import is_dense

BASE_FLAGS = ("-std=c++17", "-shared", "-fPIC", "-O3", "-ffp-contract=off", "-fwrapv",
              "-fno-trapping-math",
              "-fno-math-errno")
OPTIONAL_FLAGS = ("-march=native", "-fopenmp")     # each kept only if the compiler accepts it
COMPILERS = ("g++", "c++", "clang++")
STATS = {"compiled": 0, "loaded_from_disk": 0}      # counters, for tests and reports
_lock = threading.Lock()
_loaded: dict[Path, ctypes.CDLL] = {}
_toolchains: dict[str | None, "Toolchain"] = {}


class CppBuildError(RuntimeError):
    """No usable C++ compiler, or the generated source did not compile."""


@dataclass(frozen=True)
class Toolchain:
    compiler: str            # absolute path
    version: str             # first line of `--version`
    flags: tuple[str, ...]


def cache_dir() -> Path:
    root = os.environ.get("CHERENKOV_CACHE_DIR", Path.home() / ".cache" / "cherenkov")
    return Path(root) / "cpp"


def _cpu_id() -> str:
    """What -march=native depends on: the machine and its CPU model and features."""
    text = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "flags", "Features")):
                    text += line
                if line.strip() == "":
                    break
    except OSError:
        pass
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def find_toolchain(compiler: str | None = None) -> Toolchain:
    """The compiler (given, or the first of g++/c++/clang++ found) and the flags it accepts."""
    with _lock:
        if compiler in _toolchains:
            return _toolchains[compiler]
    path = shutil.which(compiler) if compiler else next(
        (p for p in map(shutil.which, COMPILERS) if p), None)
    if path is None:
        wanted = compiler or " / ".join(COMPILERS)
        raise CppBuildError(f"no C++ compiler found ({wanted} not on PATH): install g++ or "
                            f"pass a compiler; CPU graphs run in eager meanwhile")
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise CppBuildError(f"C++ compiler {path} does not run: {e}") from e
    version = (out.stdout.splitlines() or ["unknown"])[0]
    toolchain = Toolchain(path, version, _probe_flags(path, version))
    with _lock:
        _toolchains[compiler] = toolchain
    return toolchain


def _probe_flags(path: str, version: str) -> tuple[str, ...]:
    """BASE_FLAGS plus each optional flag the compiler accepts here (remembered on disk)."""
    key = "\0".join([path, version, _cpu_id(), *BASE_FLAGS, *OPTIONAL_FLAGS])
    record = cache_dir() / f"probe_{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
    if record.exists():
        try:
            return tuple(json.loads(record.read_text())["flags"])
        except (ValueError, KeyError):
            pass
    test = '#include <cmath>\nextern "C" float f(float* a, int n) { float s = 0;\n' \
           '#pragma omp parallel for reduction(+:s)\nfor (int i = 0; i < n; ++i) s += std::exp(a[i]);\n' \
           'return s; }\n'
    flags = list(BASE_FLAGS)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text(test)
        if _compile(path, flags, src, Path(tmp) / "base.so")[0] != 0:
            raise CppBuildError(f"C++ compiler {path} ({version}) cannot build a shared library "
                                f"with {' '.join(BASE_FLAGS)}")
        for flag in OPTIONAL_FLAGS:
            if _compile(path, flags + [flag], src, Path(tmp) / "probe.so")[0] == 0:
                flags.append(flag)
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp_record = record.with_suffix(f".tmp{os.getpid()}")
    tmp_record.write_text(json.dumps({"compiler": path, "version": version, "flags": flags}))
    tmp_record.replace(record)
    return tuple(flags)


def _compile(path: str, flags, src: Path, out: Path) -> tuple[int, str]:
    try:
        done = subprocess.run([path, *flags, str(src), "-o", str(out)], capture_output=True,
                              text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        return 1, str(e)
    return done.returncode, done.stderr


def build_library(source: str, compiler: str | None = None) -> Path:
    """The shared library for `source`, compiled once per (source, compiler, flags, CPU)."""
    tc = find_toolchain(compiler)
    key = hashlib.sha256("\0".join([source, tc.version, " ".join(tc.flags), _cpu_id()])
                         .encode()).hexdigest()[:24]
    folder = cache_dir()
    lib = folder / f"graph_{key}.so"
    if lib.exists():
        STATS["loaded_from_disk"] += 1
        return lib
    folder.mkdir(parents=True, exist_ok=True)
    # every builder writes and compiles its own copy, then renames: concurrent builders (test
    # workers, ranks) never read a half-written source or load a half-written library
    src = folder / f"graph_{key}.cpp"
    src_tmp = folder / f"graph_{key}.tmp{os.getpid()}.cpp"
    src_tmp.write_text(source)
    tmp = folder / f"graph_{key}.tmp{os.getpid()}.so"
    code, err = _compile(tc.compiler, tc.flags, src_tmp, tmp)
    if code != 0:
        tmp.unlink(missing_ok=True)
        src_tmp.replace(src)
        raise CppBuildError(f"{tc.compiler} failed on {src}:\n{err[-4000:]}")
    src_tmp.replace(src)
    tmp.replace(lib)
    STATS["compiled"] += 1
    return lib


def load_library(path: Path) -> ctypes.CDLL:
    with _lock:
        if path not in _loaded:
            _loaded[path] = ctypes.CDLL(str(path))
        return _loaded[path]


def run_many(kernels: list["CppKernel"]):
    """A callable(list of pointer ints) running `kernels` (of one library) in one C call, the
    pointers of each kernel's tensors in order (each input's storage start, each output)."""
    library = kernels[0].library
    fn = library.cherenkov_run_many
    fn.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p)]
    fn.restype = None
    n = len(kernels)
    ids = (ctypes.c_int * n)(*[k.batch_id for k in kernels])
    first = kernels[0]
    divides = any(k.divides for k in kernels)

    def call(ptrs: list) -> None:
        first.sync_threads()
        fn(n, ids, (ctypes.c_void_p * len(ptrs))(*ptrs))
        if divides:
            raise_zero_divisor(kernels)
    return call


def run_levels(kernels: list["CppKernel"], levels: list[list[int]]):
    """Like `run_many`, the kernels grouped into levels run one after another; within a level
    (independent kernels, none parallel inside) the kernels run on all threads. `levels` holds
    positions in `kernels`; the pointer list stays in `kernels` order."""
    library = kernels[0].library
    fn = library.cherenkov_run_levels
    fn.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int),
                   ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p)]
    fn.restype = None
    starts, at = [], 0
    for k in kernels:
        starts.append(at)
        at += len(k.inputs) + len(k.outputs)
    order = [i for level in levels for i in level]
    ends = list(itertools.accumulate(len(level) for level in levels))
    c_ends = (ctypes.c_int * len(ends))(*ends)
    ids = (ctypes.c_int * len(order))(*[kernels[i].batch_id for i in order])
    offsets = (ctypes.c_int * len(order))(*[starts[i] for i in order])
    first = kernels[0]
    divides = any(k.divides for k in kernels)

    def call(ptrs: list) -> None:
        first.sync_threads()
        fn(len(ends), c_ends, ids, offsets, (ctypes.c_void_p * len(ptrs))(*ptrs))
        if divides:
            raise_zero_divisor(kernels)
    return call


def raise_zero_divisor(kernels: list["CppKernel"]) -> None:
    """Eager raises on an integer division by zero; the kernels flag it (and write 0)."""
    if kernels[0].library.cherenkov_take_zero_divisor():
        names = ", ".join(k.name for k in kernels if k.divides)
        raise RuntimeError(f"ZeroDivisionError: integer division by zero (in {names})")


class CppKernel:
    """A compiled kernel called with torch CPU tensors: `Kernel.inputs`, then `Kernel.outputs`.

    Inputs may be strided views: the kernel's index expressions include their storage offset,
    so each input is passed as the start of its storage (bounds-checked against the storage).
    Outputs must be contiguous and exactly the kernel's size."""

    def __init__(self, kernel: Kernel, library: ctypes.CDLL, path: Path, source: str,
                 batch_id: int | None = None, threads: list | None = None):
        self.name = kernel.name
        self.library = library
        self.batch_id = batch_id               # index in the library's cherenkov_run_many table
        self.inputs: list[Buffer] = list(kernel.inputs)
        self.outputs: list[Buffer] = list(kernel.outputs)
        self.library_path = path
        self.source = source                   # this kernel's C++ function
        self.parallel_inside = "omp parallel" in source   # spreads its own loop over threads
        # integer division or remainder: may flag a zero divisor (raise_zero_divisor)
        self.divides = re.search(r"ck_(truncdiv|fmod|floordiv|mod)_i\(", source) is not None
        self._fn = getattr(library, kernel.name)
        self._fn.argtypes = [ctypes.c_void_p] * (len(self.inputs) + len(self.outputs))
        self._fn.restype = None
        self._set_threads = library.cherenkov_set_num_threads
        self._set_threads.argtypes = [ctypes.c_int]
        # the library's thread count, shared by its kernels: [count last set]
        self._threads = threads if threads is not None else [None]
        self._checked = False

    def sync_threads(self) -> None:
        """Set the library's OpenMP thread count to torch's when that changed."""
        threads = torch.get_num_threads()
        if threads != self._threads[0]:
            self._set_threads(threads)
            self._threads[0] = threads

    def __call__(self, *tensors: torch.Tensor) -> None:
        """The first call checks every argument; later calls (same shapes: compiled graphs are
        specialized) only pass pointers."""
        if self._checked:
            ptrs = [t.data_ptr() - t.storage_offset() * t.element_size() for t in tensors]
            self.sync_threads()
            self._fn(*ptrs)
        else:
            self._checked_call(*tensors)
            self._checked = True
        if self.divides:
            raise_zero_divisor([self])

    def _checked_call(self, *tensors: torch.Tensor) -> None:
        n_in = len(self.inputs)
        if len(tensors) != n_in + len(self.outputs):
            raise TypeError(f"{self.name} takes {n_in} inputs and {len(self.outputs)} outputs, "
                            f"got {len(tensors)} tensors")
        ptrs = []
        for i, (t, b) in enumerate(zip(tensors, self.inputs + self.outputs)):
            if t.dtype != b.dtype or t.device.type != "cpu":
                raise TypeError(f"{self.name} argument {i}: expected a CPU {b.dtype} tensor, "
                                f"got {t.device} {t.dtype}")
            size = t.element_size()
            if i < n_in:
                if t.untyped_storage().nbytes() < b.numel * size:
                    raise ValueError(f"{self.name} input {i}: storage holds fewer than the "
                                     f"{b.numel} elements the kernel addresses")
                ptrs.append(t.data_ptr() - t.storage_offset() * size)
            else:
                if t.numel() != b.numel or t.storage_offset() or not (
                        t.is_contiguous() or is_dense(t.shape, t.stride())):
                    raise ValueError(f"{self.name} output {i - n_in}: expected a dense "
                                     f"tensor of {b.numel} elements")
                ptrs.append(t.data_ptr())
        self.sync_threads()
        self._fn(*ptrs)


def compile_graph_kernels(kernels: list[Kernel], compiler: str | None = None) -> dict[str, CppKernel]:
    """Render, build (or find in the cache) and load all of a graph's kernels as one library.

    Raises CppBuildError if there is no working compiler or the source does not compile, and
    NotImplementedError if a kernel uses something the C++ renderer cannot express."""
    names = [k.name for k in kernels]
    if len(set(names)) != len(names):
        raise ValueError(f"kernel names must be unique within a graph: {names}")
    sources = [render_cpp(k) for k in kernels]
    source = PRELUDE + "".join("\n\n" + s for s in sources) + "\n\n" + dispatcher(kernels)
    path = build_library(source, compiler)
    library = load_library(path)
    threads = [None]
    return {k.name: CppKernel(k, library, path, s, batch_id=i, threads=threads)
            for i, (k, s) in enumerate(zip(kernels, sources))}


def dispatcher(kernels: list[Kernel]) -> str:
    """`cherenkov_run_many(n, ids, ptrs)`: run kernels ids[0..n) in order, each taking its
    buffers' pointers from `ptrs` in turn -- one call from Python for a run of kernels."""
    lines = ["// one call for a run of kernels: each boxed wrapper takes its arguments from the",
             "// pointer array and returns where the next kernel's begin"]
    for k in kernels:
        buffers = [f"(const {storage_type(b.dtype)}*)a[{i}]" for i, b in enumerate(k.inputs)]
        buffers += [f"({storage_type(b.dtype)}*)a[{len(k.inputs) + i}]"
                    for i, b in enumerate(k.outputs)]
        n = len(k.inputs) + len(k.outputs)
        lines.append(f"static void* const* ck_boxed_{k.name}(void* const* a) "
                     f"{{ {k.name}({', '.join(buffers)}); return a + {n}; }}")
    lines.append("typedef void* const* (*ck_boxed_fn)(void* const*);")
    lines.append("static const ck_boxed_fn ck_table[] = {"
                 + ", ".join(f"ck_boxed_{k.name}" for k in kernels) + "};")
    lines.append('extern "C" void cherenkov_run_many(int n, const int* ids, void* const* ptrs) {')
    lines.append("    for (int i = 0; i < n; ++i) ptrs = ck_table[ids[i]](ptrs);")
    lines.append("}")
    lines += [
        "// the same by levels: the kernels of one level are independent and serial inside, so",
        "// the level's kernels are spread over the threads; kernel i's pointers start at",
        "// ptrs + offsets[i]",
        'extern "C" void cherenkov_run_levels(int n_levels, const int* level_end, const int* ids,',
        "                                     const int* offsets, void* const* ptrs) {",
        "    int start = 0;",
        "    for (int l = 0; l < n_levels; ++l) {",
        "        const int end = level_end[l];",
        "        if (end - start > 1 && ck_num_threads > 1) {",
        "            #pragma omp parallel for schedule(dynamic, 1) num_threads(ck_num_threads)",
        "            for (int i = start; i < end; ++i) ck_table[ids[i]](ptrs + offsets[i]);",
        "        } else {",
        "            for (int i = start; i < end; ++i) ck_table[ids[i]](ptrs + offsets[i]);",
        "        }",
        "        start = end;",
        "    }",
        "}"]
    return "\n".join(lines) + "\n"
