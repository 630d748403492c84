"""torch.compile on mtia: registration, and the runtime of the kernels Inductor generates.

Importing TorchInductor costs seconds, so ``import torch`` must not do it. ``register()``
(called when the package loads) installs import hooks instead: when PyTorch itself imports
``torch._inductor.codegen.common`` (the first ``torch.compile``), the mtia backend
(``_inductor_backend``) registers there before Inductor's own defaults; when it imports
``torch._dynamo.device_interface``, the device interface registers.

The rest of this module is what a compiled graph's wrapper code calls at run time:
``GeneratedKernel`` objects, one per generated kernel. The kernels a wrapper defines are
compiled together on the first call (one clang and lld run per graph) into a kernel module,
cached on disk under its source's hash: a second process, or a second compile of the same
graph, compiles nothing. The module is loaded once per device and its kernels launch on the
current stream.
"""

import hashlib
import importlib.abc
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
import time
import weakref
from typing import Callable, Dict, List, Optional

from . import _C

__all__ = ["GeneratedKernel", "compile_stats", "reset_compile_stats", "kernel_cache_dir"]

# --- import hooks --------------------------------------------------------------------------


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs a function right after a module is first imported (by anyone)."""

    def __init__(self, name: str, fn: Callable[[], None]):
        self.name, self.fn, self.spec = name, fn, None

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name or self.spec is not None:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return None
        self.spec = spec
        self.inner = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        self.fn()


def after_import(name: str, fn: Callable[[], None]) -> None:
    if name in sys.modules:
        fn()
    else:
        sys.meta_path.insert(0, _AfterImport(name, fn))


def register() -> None:
    """Installs the hooks that register the mtia compiler backend and device interface when
    PyTorch imports the modules they belong to."""

    def backend():
        from torch._inductor.codegen import common
        common.register_backend_for_device("mtia", _SchedulingShim, _WrapperShim,
                                           device_custom_pass=_backend_version_pass())

    def op_overrides():
        # After PyTorch's own mtia overrides (which name a runtime the emulator is not).
        from . import _inductor_backend
        _inductor_backend.register_op_overrides()

    def lowering_checks():
        from torch._inductor.graph import GraphLowering
        run = GraphLowering.run
        update_scheduler = GraphLowering._update_scheduler

        def checked_run(self, *args, **kwargs):
            from . import _inductor_backend
            _inductor_backend.install_lowering_checks()
            return run(self, *args, **kwargs)

        def scheduler_with_limits(self):
            # A graph with mtia work fuses within the device's launch limits: Inductor's
            # guardrails for MTIA, set from the open device while this graph is scheduled.
            if "mtia" not in self.device_types:
                return update_scheduler(self)
            from torch._inductor import config
            from ._inductor import inductor_config
            with config.patch(inductor_config()):
                return update_scheduler(self)
        GraphLowering.run = checked_run
        GraphLowering._update_scheduler = scheduler_with_limits

    def scheduler():
        # Inductor asks for Triton before it creates any "GPU" backend, mtia included; the
        # emulator's backend needs none.
        from torch._inductor.codegen.common import get_scheduling_for_device
        from torch._inductor.scheduler import Scheduler
        from torch._inductor.virtualized import V
        create = Scheduler.create_backend

        def create_backend(self, device):
            if device.type == "mtia":
                V.graph.add_device_info(device)
                return get_scheduling_for_device("mtia")(self)
            return create(self, device)
        Scheduler.create_backend = create_backend

    def dynamo():
        from . import _dynamo_interface
        _dynamo_interface.register()

    after_import("torch._subclasses.fake_impls", _register_fake_convolution)
    after_import("torch._inductor.decomposition", _keep_pooling_whole)
    after_import("torch._inductor.decomposition", _circular_padding_from_slices)
    after_import("torch._inductor.codegen.common", backend)
    after_import("torch._inductor.codegen.mtia.device_op_overrides", op_overrides)
    after_import("torch._inductor.graph", lowering_checks)
    after_import("torch._inductor.scheduler", scheduler)
    after_import("torch._dynamo.device_interface", dynamo)


def _register_fake_convolution() -> None:
    """Fake tensors (what torch.compile traces with) of mtia convolutions get the memory format
    the device's kernels give: channels-last outputs for channels-last inputs, as on the CPU.
    PyTorch's own rule for an out-of-tree ("overrideable") convolution says contiguous, and a
    compiled graph checks its extern kernels' strides against the fake ones."""
    import torch
    from torch._subclasses import fake_impls

    aten = torch.ops.aten
    ops = (aten.convolution.default, aten.convolution_backward.default)
    original = fake_impls.op_implementations_dict.get(ops[0])
    if original is None or getattr(original, "_mtia", False):
        return

    def fmt(t):
        f = torch._prims_common.suggest_memory_format(t)
        if (f is torch.channels_last and t.dim() == 4) or (
                f is torch.channels_last_3d and t.dim() == 5):
            return f
        return torch.contiguous_format

    def conv(fake_mode, func, *args, **kwargs):
        out = original(fake_mode, func, *args, **kwargs)
        _, kw = fake_impls._normalize_function_or_error(
            func, args=args, kwargs=kwargs, normalize_to_only_use_kwargs=True)
        x, w = kw["input"], kw["weight"]
        if x.fake_device.type != "mtia":
            return out
        with fake_mode:
            if func is aten.convolution.default:
                return out.contiguous(memory_format=fmt(x))
            gi, gw, gb = out
            return (gi.contiguous(memory_format=fmt(x)) if gi is not None else None,
                    gw.contiguous(memory_format=fmt(w)) if gw is not None else None, gb)

    conv._mtia = True
    for op in ops:
        fake_impls.op_implementations_dict[op] = conv


def _keep_pooling_whole() -> None:
    """Inductor decomposes max pooling into window loads (a generated loop per window
    element) and its backward into a scatter_add over the indices; on mtia the library's
    pool2d and pool2d_backward kernels do them faster, so both ops stay whole and run as
    extern calls (the lowering check sends them there)."""
    import torch
    from torch._inductor import decomposition

    aten = torch.ops.aten
    for op in (aten.max_pool2d_with_indices.default,
               aten.max_pool2d_with_indices_backward.default):
        original = decomposition.decompositions.get(op)
        if original is None or getattr(original, "_mtia", False):
            continue

        def decompose(x, *args, _original=original, **kwargs):
            if x.device.type == "mtia":
                return NotImplemented
            return _original(x, *args, **kwargs)

        decompose._mtia = True
        decomposition.decompositions[op] = decompose


def _circular_padding_from_slices() -> None:
    """Circular padding as the concatenation of slices of its input, on mtia. PyTorch's own
    decomposition writes the input into an empty tensor and then copies the padding from that
    tensor's interior; functionalized and fused, the first kernel reads the empty tensor's
    unwritten bytes at the padding (whose values the next kernel then replaces), which the
    device sanitizer's initcheck rightly reports. Concatenated slices read only the input."""
    import torch
    from torch._C import DispatchKey

    op = torch.ops.aten._pad_circular.default
    if getattr(op, "_mtia_slices", False):
        return

    def pad_circular(x, pad):
        if x.device.type != "mtia":
            return op.decompose(x, pad)
        for i in range(len(pad) // 2):
            dim = x.dim() - 1 - i
            left, right = pad[2 * i], pad[2 * i + 1]
            # Negative padding crops first; the padding wraps around what is left.
            start, stop = max(-left, 0), x.shape[dim] - max(-right, 0)
            core = x.narrow(dim, start, stop - start)
            n = core.shape[dim]
            pieces = ([core.narrow(dim, n - left, left)] if left > 0 else []) + [core] + (
                [core.narrow(dim, 0, right)] if right > 0 else [])
            x = torch.cat(pieces, dim) if len(pieces) > 1 else core
        return x

    # The tracer of torch.compile runs with the Python dispatcher, which takes these in place
    # of the C++ composite; eager calls are unaffected.
    op.py_impl(DispatchKey.CompositeImplicitAutograd)(pad_circular)
    op.py_impl(DispatchKey.Autograd)(pad_circular)
    op._mtia_slices = True


def _backend_version_pass():
    """A graph pass that changes nothing: its uuid, the hash of the code generator and the
    kernel runtime, is part of Inductor's FX graph cache key, so a cached graph's wrapper code
    (with its generated C) is never reused by another version of this backend."""
    from torch._inductor.custom_graph_pass import CustomGraphModulePass

    class BackendVersion(CustomGraphModulePass):
        def __call__(self, gm):
            return None

        def uuid(self):
            h = hashlib.sha256()
            here = os.path.dirname(os.path.abspath(__file__))
            for name in ("_codegen.py", "_inductor_backend.py", "_compiler.py"):
                with open(os.path.join(here, name), "rb") as f:
                    h.update(f.read())
            h.update(_get_toolkit().fingerprint.encode())
            return h.hexdigest()

    return BackendVersion()


class _SchedulingType(type):
    def __getattr__(cls, name):
        from . import _inductor_backend
        return getattr(_inductor_backend.MtiaScheduling, name)


class _SchedulingShim(metaclass=_SchedulingType):
    """Stands for MtiaScheduling until Inductor is fully loaded: creating one creates the real
    scheduling, and class attributes are the real class's."""

    def __new__(cls, scheduler):
        from . import _inductor_backend
        return _inductor_backend.MtiaScheduling(scheduler)


class _WrapperType(type):
    def __getattr__(cls, name):
        from . import _inductor_backend
        return getattr(_inductor_backend.MtiaWrapperCodegen, name)


class _WrapperShim(metaclass=_WrapperType):
    """Stands for the wrapper codegen class until Inductor is fully loaded: Inductor reads
    class attributes of the registered wrapper (create, supports_caching, ...), and each is the
    real class's, imported on first use."""


# --- compile statistics --------------------------------------------------------------------

_stats_lock = threading.Lock()
_stats = {"kernels_generated": 0, "kernels_compiled": 0, "modules_compiled": 0,
          "cache_hits": 0, "compile_seconds": 0.0, "launches": 0}


def _count(key: str, value=1) -> None:
    with _stats_lock:
        _stats[key] += value


def compile_stats() -> Dict[str, float]:
    """What the mtia compiler did in this process: kernels_generated (C kernels Inductor's
    code generation produced), kernels_compiled and modules_compiled (clang runs), cache_hits
    (kernels found compiled in the disk cache), compile_seconds (clang and lld wall time),
    launches (of generated kernels)."""
    with _stats_lock:
        return dict(_stats)


def reset_compile_stats() -> None:
    with _stats_lock:
        for k in _stats:
            _stats[k] = 0.0 if k == "compile_seconds" else 0


# --- the kernel toolchain ------------------------------------------------------------------

def kernel_cache_dir() -> str:
    """Where compiled kernel modules are kept: $MTIA_EMU_KERNEL_CACHE, else the folder
    "mtia" of Inductor's cache ($TORCHINDUCTOR_CACHE_DIR or its default)."""
    d = _C._setting("MTIA_EMU_KERNEL_CACHE")
    if not d:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
        d = os.path.join(cache_dir(), "mtia")
    os.makedirs(d, exist_ok=True)
    return d


class _Toolkit:
    """clang, lld and the kernel SDK's files: the source tree's (a build-tree backend) or the
    installation's share/mtia-emu/kernels (an installed one)."""

    def __init__(self):
        presets = _C._preset_dir()
        root = os.path.dirname(os.path.abspath(presets))
        if os.path.isdir(os.path.join(root, "kernels", "lib")) and os.path.isdir(
                os.path.join(root, "isa", "include")):  # the source tree
            k = os.path.join(root, "kernels")
            self.includes = [os.path.join(root, "isa", "include"), os.path.join(k, "include"),
                             os.path.join(k, "lib")]
            self.runtime = [os.path.join(k, "src", "rt.c"), os.path.join(k, "lib", "module_start.S")]
            self.link_script = os.path.join(k, "link.ld")
        else:  # <prefix>/share/mtia-emu/presets -> <prefix>/share/mtia-emu/kernels
            k = os.path.join(root, "kernels")
            prefix = os.path.dirname(os.path.dirname(root))
            self.includes = [os.path.join(prefix, "include"), os.path.join(k, "include"),
                             os.path.join(k, "lib")]
            self.runtime = [os.path.join(k, "src", "rt.c"), os.path.join(k, "lib", "module_start.S")]
            self.link_script = os.path.join(k, "link.ld")
        self.cc = shutil.which("clang")
        # The target flags are the build's (kernels/mtia_kernel_image.cmake); generated code
        # leaves variables unused, so those warnings are off. Line tables let the sanitizer's
        # and the faults' reports name the generated source's lines.
        self.flags = [*_C._kernel_target_flags().split(), "-O2", "-gline-tables-only",
                      "-std=c99", "-Wall", "-Wno-unused-variable",
                      "-Wno-unused-but-set-variable", "-fuse-ld=lld"]
        # The cache key covers what the output depends on besides the kernel's own source.
        h = hashlib.sha256(" ".join(self.flags).encode())
        for d in self.includes:
            for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
                if f.endswith(".h"):
                    with open(os.path.join(d, f), "rb") as fh:
                        h.update(fh.read())
        for f in self.runtime + [self.link_script]:
            if os.path.exists(f):
                with open(f, "rb") as fh:
                    h.update(fh.read())
        self.fingerprint = h.hexdigest()

    def compile(self, source: str, out_elf: str, names: List[str]) -> None:
        if self.cc is None:
            raise RuntimeError("torch_mtia_emu: compiling mtia kernels needs clang and ld.lld "
                               "(Debian packages clang and lld); clang is not on PATH")
        # Several processes (the ranks of one job) may compile the same module into the shared
        # cache at once: each writes files of its own and renames them into place, so no one
        # reads a half-written source or image.
        base = out_elf[:-len(".elf")]
        mine = f"{base}.{os.getpid()}"
        with open(mine + ".c", "w") as f:
            f.write(source)
        # The line table names the source by the path it keeps, not this process's copy.
        cmd = [self.cc, *self.flags, f"-fdebug-prefix-map={mine}.c={base}.c",
               *(f"-I{d}" for d in self.includes),
               f"-Wl,-T,{self.link_script}", *self.runtime, mine + ".c", "-o", mine + ".elf"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        os.replace(mine + ".c", base + ".c")
        if r.returncode != 0:
            raise RuntimeError(
                f"torch_mtia_emu: compiling the generated mtia kernel(s) {', '.join(names)} "
                f"failed; the source is {base}.c\n{r.stderr[-4000:]}")
        os.replace(mine + ".elf", out_elf)


_toolkit: Optional[_Toolkit] = None


def _get_toolkit() -> _Toolkit:
    global _toolkit
    if _toolkit is None:
        _toolkit = _Toolkit()
    return _toolkit


# --- generated kernels ---------------------------------------------------------------------

_lock = threading.Lock()
_pending: List["GeneratedKernel"] = []
_modules: Dict[tuple, int] = {}  # (device index, module key) -> handle from _C._load_module
_kernels: "weakref.WeakSet[GeneratedKernel]" = weakref.WeakSet()


def _all_kernels() -> List["GeneratedKernel"]:
    """The generated kernels alive in this process (for tests and diagnostics)."""
    return list(_kernels)


def _build(batch: List["GeneratedKernel"]) -> None:
    """Gives each kernel its module: from the disk cache, where each kernel's entry names the
    module that holds it, or compiled now, all the missing ones in one module (one clang run).
    Kernels with the same name have the same source (the name ends in its hash): one copy."""
    tk = _get_toolkit()
    cache = kernel_cache_dir()
    unique: Dict[str, "GeneratedKernel"] = {}
    for k in batch:
        unique.setdefault(k.name, k)
    missing = []
    for k in unique.values():
        entry = os.path.join(cache, _kernel_key(tk, k) + ".kernel")
        module = None
        if os.path.exists(entry):
            with open(entry) as f:
                module = f.read().strip()
        if module and os.path.exists(os.path.join(cache, module + ".elf")):
            _count("cache_hits")
            k.key = module
        else:
            missing.append(k)
    if missing:
        source = "\n".join(k.source for k in missing)
        key = hashlib.sha256((tk.fingerprint + source).encode()).hexdigest()[:40]
        path = os.path.join(cache, key + ".elf")
        if not os.path.exists(path):
            t = time.perf_counter()
            tk.compile(source, path, [k.name for k in missing])
            _count("compile_seconds", time.perf_counter() - t)
            _count("kernels_compiled", len(missing))
            _count("modules_compiled")
        for k in missing:
            k.key = key
            entry = os.path.join(cache, _kernel_key(tk, k) + ".kernel")
            with open(f"{entry}.{os.getpid()}", "w") as f:
                f.write(key)
            os.replace(f"{entry}.{os.getpid()}", entry)
    for k in batch:
        k.key = unique[k.name].key
        with open(os.path.join(cache, k.key + ".elf"), "rb") as f:
            k.elf = f.read()


def _kernel_key(tk: "_Toolkit", k: "GeneratedKernel") -> str:
    return hashlib.sha256((tk.fingerprint + k.source).encode()).hexdigest()[:40]


class GeneratedKernel:
    """One generated kernel, as a compiled graph's wrapper defines it: called with its tensor
    and integer arguments (the kernel's signature order) and, last, its work (the elements of
    its iteration space times its cost per element), which chooses the PE grid."""

    def __init__(self, name: str, source: str):
        self.name = name
        self.source = source
        self.key: Optional[str] = None
        self.elf: Optional[bytes] = None
        _count("kernels_generated")
        with _lock:
            _pending.append(self)
            _kernels.add(self)

    def _compile(self) -> None:
        with _lock:
            if self.elf is not None:
                return
            batch = [k for k in _pending if k.elf is None]
            if self not in batch:
                batch.append(self)
            _pending.clear()
            try:
                _build(batch)
            except RuntimeError:
                if len(batch) == 1:
                    raise
                # Each kernel on its own, so that one broken kernel fails only itself.
                for k in batch:
                    if k is not self:
                        try:
                            _build([k])
                        except RuntimeError:
                            pass
                _build([self])

    def __call__(self, *args) -> None:
        import torch
        *kargs, work = args
        packed = []
        for a in kargs:
            if isinstance(a, torch.Tensor) and a.device.type == "cpu":
                # A 0-d CPU tensor goes by value: its element's bits.
                raw = a.detach().reshape(1).view(torch.uint8).tolist()
                packed.append(("i64", int.from_bytes(bytes(raw), "little", signed=False)
                               - (1 << 64 if len(raw) == 8 and raw[-1] >= 128 else 0)))
            elif isinstance(a, torch.Tensor):
                packed.append(("ptr", a.data_ptr()))
            else:
                packed.append(("i64", int(a)))
        self.launch_raw(packed, int(work))

    def launch_raw(self, packed: List[tuple], work: int) -> None:
        """Launches with ("ptr"|"i64", value) arguments on the current device and stream."""
        if self.elf is None:
            self._compile()
        import torch
        device = torch.mtia.current_device()
        handle = _modules.get((device, self.key))
        if handle is None:
            with _lock:
                handle = _modules.get((device, self.key))
                if handle is None:
                    handle = _C._load_module(self.elf)
                    _modules[(device, self.key)] = handle
        rows, cols = _grid(work)
        _count("launches")
        _C._launch_module(handle, self.name, rows, cols, packed)


def empty_strided_mtia(size, stride, dtype):
    """What compiled graphs allocate their buffers with, on the current mtia device."""
    import torch
    return torch.empty_strided(size, stride, dtype=dtype, device="mtia")


def _grid(work: int):
    """PEs for `work` element-operations: one per 16384, at most the chip (or
    $MTIA_EMU_MAX_PES), as the library's launches choose for one operation per element; every PE
    a launch starts costs host time."""
    limit = max(1, min(64, int(_C._setting("MTIA_EMU_MAX_PES") or 64)))
    pes = max(1, min(limit, (work + 16383) // 16384))
    if pes <= 8:
        return 1, pes
    return (pes + 7) // 8, 8
