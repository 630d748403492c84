"""The TorchInductor code generator for mtia: a fused loop nest becomes a C kernel for the PEs.

Inductor hands the backend scheduler nodes whose bodies are small programs over an iteration
space: loads and stores at index expressions, elementwise math, at most one reduction. This
module runs such a body with its own ops handler (``KernelBuilder``), which emits C against
the intrinsics header and ``kernels/lib/kgen.h``:

- the space is cut into boxes that fit the local store (kgen.h); a PE takes boxes in turn;
- a load whose index is affine in the loop variables is one N-D DMA of the box (its element
  strides per dimension); any other load (a view that merges dimensions, an indirect index, a
  masked load) is a gather: the control core computes each element's address;
- every op is one SE operation over the tile; fp16 and bf16 compute in fp32, as the library's
  kernels do, and round once at the store;
- a reduction is an RE operation over rows x cols of the tile, accumulated across boxes when a
  row is longer than a tile.

What it cannot express raises ``Unsupported`` with the reason; ``_compiler`` checks every
lowering with the same builder, so such ops become extern calls to the device's ATen kernels
before scheduling, and code generation never meets them.
"""

import itertools
from typing import Dict, List, Optional, Sequence, Tuple

import sympy
import torch
from torch._inductor.utils import sympy_product
from torch._inductor.virtualized import V
from torch.utils._sympy.functions import (CeilDiv, CleanDiv, FloorDiv, Identity, Max, Min,
                                          ModularIndexing)


class Unsupported(Exception):
    """The code generator cannot express this body; the message says why."""


# PyTorch dtype -> (kernel dtype name, bytes). The device's dtypes (docs/pe-isa.md).
DTYPES = {
    torch.float32: ("FP32", 4), torch.float16: ("FP16", 2), torch.bfloat16: ("BF16", 2),
    torch.int8: ("INT8", 1), torch.int32: ("INT32", 4), torch.int64: ("INT64", 8),
    torch.bool: ("BOOL", 1),
}
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INTS = (torch.int8, torch.int32, torch.int64)

# Inductor op -> SE op, for ops that are one SE operation with operands of one dtype.
UNARY = {
    "abs": "ABS", "neg": "NEG", "relu": "RELU", "exp": "EXP", "log": "LOG", "sqrt": "SQRT",
    "rsqrt": "RSQRT", "tanh": "TANH", "erf": "ERF", "sigmoid": "SIGMOID", "sin": "SIN",
    "cos": "COS", "tan": "TAN", "asin": "ASIN", "acos": "ACOS", "atan": "ATAN", "sinh": "SINH",
    "cosh": "COSH", "asinh": "ASINH", "acosh": "ACOSH", "atanh": "ATANH", "expm1": "EXPM1",
    "log1p": "LOG1P", "log2": "LOG2", "log10": "LOG10", "exp2": "EXP2", "erfc": "ERFC",
    "lgamma": "LGAMMA", "floor": "FLOOR", "ceil": "CEIL", "round": "ROUND", "trunc": "TRUNC",
    "reciprocal": "RECIPROCAL", "sign": "SIGN", "bitwise_not": "BNOT",
}
FLOAT_ONLY = {"EXP", "LOG", "SQRT", "RSQRT", "TANH", "ERF", "SIGMOID", "SIN", "COS", "TAN",
              "ASIN", "ACOS", "ATAN", "SINH", "COSH", "ASINH", "ACOSH", "ATANH", "EXPM1",
              "LOG1P", "LOG2", "LOG10", "EXP2", "ERFC", "LGAMMA", "FLOOR", "CEIL", "ROUND",
              "TRUNC", "RECIPROCAL", "POW", "ATAN2", "HYPOT", "COPYSIGN"}
BINARY = {
    "add": "ADD", "sub": "SUB", "mul": "MUL", "truediv": "DIV", "div": "DIV",
    "minimum": "MIN", "maximum": "MAX", "fmod": "FMOD", "remainder": "REMAINDER",
    "floordiv": "FLOOR_DIV", "truncdiv": "DIV", "pow": "POW", "atan2": "ATAN2",
    "hypot": "HYPOT", "copysign": "COPYSIGN", "bitwise_and": "BAND", "bitwise_or": "BOR",
    "bitwise_xor": "BXOR", "bitwise_left_shift": "SHL", "bitwise_right_shift": "SHR",
    "int_truediv": "DIV", "div_rn": "DIV",
}
COMPARE = {"eq": "EQ", "ne": "NE", "lt": "LT", "le": "LE", "gt": "GT", "ge": "GE",
           "logical_and": "LAND", "logical_or": "LOR", "logical_xor": "LXOR"}
REDUCTIONS = ("sum", "max", "min", "any", "argmax", "argmin", "welford_reduce")
# Reductions that need a whole row in one tile (no accumulation across tiles).
WHOLE_ROW_REDUCTIONS = ("argmax", "argmin", "welford_reduce")
# The longest reduced row those may have: it must fit the smallest preset's local store.
MAX_WHOLE_ROW = 2048


def _is_cpu_scalar(name: str) -> bool:
    """A 0-d CPU tensor read by a device kernel (an optimizer's step count, say)."""
    if name in V.graph.zero_dim_cpu_tensor_list:
        return True
    buf = V.graph.graph_inputs.get(name) or V.graph.name_to_buffer.get(name)
    if buf is None:
        return False
    try:
        return buf.get_device().type == "cpu" and len(buf.get_size()) == 0
    except Exception:
        return False


def _storage_elements(name: str):
    """The elements a buffer's layout spans (what a kernel may read of it), or None."""
    try:
        return sympy.sympify(V.graph.get_buffer(name).get_layout().storage_size())
    except Exception:
        return None


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp16 and bf16 values are computed in fp32 (rounded once at the store)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def check_dtype(dtype: torch.dtype, what: str) -> None:
    if dtype not in DTYPES:
        raise Unsupported(f"{what} has dtype {dtype}, which the device's units do not take")


class Value:
    """A value of the body: a tile in the local store ('elem': one per element of the box,
    'row': one per output row) or an immediate (a bit pattern)."""

    def __init__(self, kind: str, dtype: torch.dtype, ref: str, shape: str = "elem"):
        self.kind = kind  # "tile" or "imm"
        self.dtype = dtype
        self.ref = ref  # C name of the tile, or the immediate's bits as C text
        self.shape = shape
        # Known to be the same along the innermost loop dimension (a load with stride 0 there,
        # and math on such values): an indirect index from it addresses whole rows.
        self.const_last = kind == "imm"

    def __repr__(self):
        return f"Value({self.kind}, {self.dtype}, {self.ref}, {self.shape})"


def _bits(value, dtype: torch.dtype) -> int:
    """The bit pattern of a Python scalar as one element of dtype."""
    t = torch.tensor([value], dtype=torch.float64 if dtype in FLOATS else torch.int64)
    t = t.to(dtype)
    size = DTYPES[dtype][1]
    raw = t.view(torch.uint8).tolist()
    return int.from_bytes(bytes(raw[:size]), "little")


class CPrinter:
    """Index expressions (sympy) as C int64 expressions."""

    def __init__(self, names: Dict[sympy.Symbol, str]):
        self.names = names

    def __call__(self, e) -> str:
        if isinstance(e, (int, sympy.Integer)):
            return f"((int64_t){int(e)})"
        if isinstance(e, sympy.Symbol):
            if e not in self.names:
                raise Unsupported(f"index symbol {e} has no value in the kernel")
            return self.names[e]
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(self(a) for a in e.args) + ")"
        if isinstance(e, sympy.Mul):
            return "(" + " * ".join(self(a) for a in e.args) + ")"
        if isinstance(e, FloorDiv):
            return f"kgen_floordiv({self(e.args[0])}, {self(e.args[1])})"
        if isinstance(e, CleanDiv):
            return f"({self(e.args[0])} / {self(e.args[1])})"
        if isinstance(e, CeilDiv):
            return f"(-kgen_floordiv(-({self(e.args[0])}), {self(e.args[1])}))"
        if isinstance(e, ModularIndexing):
            x, d, m = (self(a) for a in e.args)
            return f"kgen_mod(kgen_floordiv({x}, {d}), {m})"
        if isinstance(e, Identity):
            return self(e.args[0])
        if isinstance(e, sympy.Pow) and isinstance(e.args[1], sympy.Integer) and e.args[1] > 0:
            return "(" + " * ".join([self(e.args[0])] * int(e.args[1])) + ")"
        if isinstance(e, sympy.Abs):  # reflection padding's indices
            a = self(e.args[0])
            return f"(({a}) < 0 ? -({a}) : ({a}))"
        if isinstance(e, (sympy.Min, sympy.Max, Min, Max)):
            op = "<" if isinstance(e, (sympy.Min, Min)) else ">"
            out = self(e.args[0])
            for a in e.args[1:]:
                b = self(a)
                out = f"(({out}) {op} ({b}) ? ({out}) : ({b}))"
            return out
        raise Unsupported(f"index expression {e} ({type(e).__name__}) has no C form here")


def affine(expr, variables: Sequence[sympy.Symbol],
           negative: bool = False) -> Optional[Tuple[List, sympy.Expr]]:
    """(coefficients per variable, offset) when expr is affine in the variables with
    non-negative coefficients (any sign with `negative`), else None."""
    expr = sympy.expand(expr)
    coeffs = [sympy.Integer(0)] * len(variables)
    offset = sympy.Integer(0)
    for term in sympy.Add.make_args(expr):
        hits = [i for i, v in enumerate(variables) if term.has(v)]
        if not hits:
            if any(isinstance(a, sympy.Symbol) and a.name.startswith("ind")
                   for a in term.free_symbols):
                return None
            offset += term
            continue
        if len(hits) > 1:
            return None
        c = sympy.cancel(term / variables[hits[0]])
        if c.has(variables[hits[0]]) or any(
                s.name.startswith("ind") for s in c.free_symbols):
            return None
        coeffs[hits[0]] += c
    for c in coeffs:
        if c.is_number and c < 0 and not negative:
            return None
    return coeffs, offset


class KernelBuilder:
    """The ops handler that turns loop bodies over one iteration space into the C body of a
    kernel. ``sizes``: the space's dimensions (sympy), the last ``nred`` reduced."""

    def __init__(self, sizes: Sequence, nred: int):
        self.sizes = list(sizes) or [sympy.Integer(1)]
        self.n = len(self.sizes)
        self.nred = nred if sizes else 0
        self.vars = [sympy.Symbol(f"v{i}", integer=True, nonnegative=True)
                     for i in range(self.n)]
        self.lines: List[str] = []  # the box loop's body
        # DMA loads issued together at the start of a box (one wait for all of them).
        self.prologue: List[str] = []
        self.tiles: List[Tuple[str, int, str]] = []  # (name, element bytes, shape)
        self.buffers: Dict[str, str] = {}  # buffer name -> C pointer name
        self.scalars: Dict[str, str] = {}  # 0-d CPU tensors, passed by value -> C name
        self.stored: Dict[Tuple[str, str], Value] = {}  # (buffer, index) -> value stored
        self.loaded: Dict[Tuple[str, str], Value] = {}
        # (element strides per loop dimension, element bytes) of each affine load and store.
        self.accesses: List[Tuple[List, int]] = []
        self.gathers = 0  # loads that are not one DMA of the box
        # Values already computed, by (op, dtypes, shape, operands): Inductor's bodies repeat
        # subexpressions (a backward recomputes its forward's), and each would be an SE pass.
        self.computed: Dict[tuple, Value] = {}
        self.computed_in_epilogue: List[tuple] = []
        self.symbols: Dict[sympy.Symbol, str] = {}  # size symbols -> C names (kernel args)
        self.indirect: Dict[sympy.Symbol, Tuple[Value, sympy.Expr, bool]] = {}
        self.need_rows = False
        self.has_reduction = False
        self.mask: Optional[Value] = None
        # Inside a reduction's epilogue (pointwise nodes over its output rows, fused after it):
        # values are rows, loads and stores cover the box's unreduced dimensions.
        self.epilogue = False
        self.iota: Optional[Value] = None  # 0, 1, ... (int64), for affine index values
        self.iota_tmp: Optional[Value] = None
        self.removed: set = set()  # stores to skip (buffers that live only in this kernel)
        self.counter = itertools.count()
        self.var_ranges = dict(zip(self.vars, self.sizes))

    def cost_per_element(self) -> int:
        """The kernel's work per element of its space, in units of one SE pass (what the
        launch's PE count is chosen for): a fused body of many operations is spread over more
        PEs than one operation on the same elements."""
        ops = sum(line.count("kgen_se(") + line.count("mtia_reduce(") for line in self.lines)
        return max(1, (ops + 3) // 4)

    # --- helpers ---------------------------------------------------------------------------

    def _tile(self, dtype: torch.dtype, shape: str = "elem") -> Value:
        name = f"t{len(self.tiles)}"
        self.tiles.append((name, DTYPES[dtype][1], shape))
        return Value("tile", dtype, name, shape)

    def _count(self, shape: str) -> str:
        return "n" if shape == "elem" else "rows"

    def _sym(self, e) -> str:
        """C text of a size expression (symbols become kernel arguments)."""
        e = sympy.sympify(e)
        for s in e.free_symbols:
            if s not in self.symbols and s not in self.vars and s not in self.indirect:
                self.symbols[s] = f"ks_{s.name}"
        names = dict(self.symbols)
        names.update({v: f"v{i}" for i, v in enumerate(self.vars)})
        names.update({s: f"ind_{s.name}" for s in self.indirect})
        return CPrinter(names)(e)

    def _ptr(self, name: str) -> str:
        if name not in self.buffers:
            self.buffers[name] = f"p{len(self.buffers)}"
        return self.buffers[name]

    @staticmethod
    def _real(name: str) -> str:
        """The buffer a name stands for in memory: a mutation's output is its input's buffer,
        and a load after a store to it (in this kernel) must see the store."""
        sched = getattr(V.graph, "scheduler", None)
        return sched.mutation_real_name.get(name, name) if sched is not None else name

    def _simplify(self, index):
        return V.graph.sizevars.simplify_with_ranges(sympy.sympify(index), self.var_ranges)

    def _materialize(self, v: Value, shape: str = "elem") -> Value:
        """An immediate as a tile (for ops that need a vector)."""
        if v.kind == "tile":
            if v.shape == "row" and shape == "elem":
                raise Unsupported("a reduced value used inside the reduction")
            return v
        t = self._tile(v.dtype, shape)
        self.lines.append(f"kse_fill(MTIA_PE_DT_{DTYPES[v.dtype][0]}, {t.ref}, {v.ref}u, "
                          f"(uint32_t){self._count(shape)});")
        return t

    def _operand(self, v: Value) -> Tuple[int, str]:
        if v.kind == "imm":
            return 2, f"(uint64_t){v.ref}u"
        return 0, f"kaddr({v.ref})"

    def _shape_of(self, *vals: Value) -> str:
        shapes = {v.shape for v in vals if v.kind == "tile"}
        if len(shapes) > 1:
            raise Unsupported("a reduced value mixed with unreduced ones")
        return shapes.pop() if shapes else "elem"

    def _se(self, op: str, in_dt: torch.dtype, out_dt: torch.dtype, args: Sequence[Value],
            shape: Optional[str] = None) -> Value:
        shape = shape or self._shape_of(*args)
        key = (op, in_dt, out_dt, shape, tuple((a.kind, a.dtype, a.ref, a.shape) for a in args))
        if key in self.computed:
            return self.computed[key]
        if all(a.kind == "imm" for a in args):
            args = [self._materialize(args[0], shape)] + list(args[1:])
        out = self._tile(out_dt, shape)
        out.const_last = all(a.const_last for a in args)
        ops = [self._operand(a) for a in args] + [(0, "0")] * (3 - len(args))
        flat = ", ".join(f"{m}, {r}" for m, r in ops)
        self.lines.append(f"kgen_se(MTIA_PE_SE_{op}, MTIA_PE_DT_{DTYPES[in_dt][0]}, "
                          f"MTIA_PE_DT_{DTYPES[out_dt][0]}, {out.ref}, "
                          f"(uint32_t){self._count(shape)}, {flat});")
        self.computed[key] = out
        if self.epilogue:
            self.computed_in_epilogue.append(key)
        return out

    def _cast(self, v: Value, dtype: torch.dtype) -> Value:
        if v.dtype == dtype:
            return v
        check_dtype(dtype, "a cast")
        if v.kind == "imm":
            return Value("imm", dtype, str(_bits(self._imm_value(v), dtype)))
        return self._se("CAST", v.dtype, dtype, [v])

    def _imm_value(self, v: Value):
        raw = int(v.ref).to_bytes(DTYPES[v.dtype][1], "little")
        t = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(v.dtype)
        return t.item()

    def _same(self, a: Value, b: Value) -> Tuple[Value, Value, torch.dtype]:
        if a.dtype != b.dtype:
            dt = torch.promote_types(a.dtype, b.dtype)
            a, b = self._cast(a, dt), self._cast(b, dt)
        return a, b, a.dtype

    # --- the ops Inductor's bodies call ----------------------------------------------------

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise Unsupported(f"op '{name}' has no SE form")

    def constant(self, value, dtype):
        dtype = compute_dtype(dtype)
        check_dtype(dtype, "a constant")
        return Value("imm", dtype, str(_bits(value, dtype)))

    def load(self, name: str, index):
        dtype = V.graph.get_dtype(name)
        check_dtype(dtype, f"buffer {name}")
        index = self._simplify(index)
        if _is_cpu_scalar(name):
            # A 0-d CPU tensor (an optimizer's step count): its value is a kernel argument.
            if name not in self.scalars:
                self.scalars[name] = f"sc{len(self.scalars)}"
            t = self._tile(dtype)
            self.lines.append(f"kse_fill(MTIA_PE_DT_{DTYPES[dtype][0]}, {t.ref}, "
                              f"(uint64_t){self.scalars[name]}, (uint32_t)n);")
            return self._cast(t, compute_dtype(dtype))
        name = self._real(name)
        key = (name, str(index))
        if key in self.stored and self.mask is None:
            return self.stored[key]
        if self.mask is not None:
            key = key + (self.mask.ref,)
        if key in self.loaded:
            return self.loaded[key]
        es = DTYPES[dtype][1]
        ptr = self._ptr(name)
        if self.epilogue:
            return self._load_rows(name, index, dtype, ptr, key)
        t = self._tile(dtype)
        aff = affine(index, self.vars) if self.mask is None else None
        if aff is not None:
            coeffs, off = aff
            self.accesses.append((coeffs, es))
            st = ", ".join(self._sym(c) for c in coeffs)
            decl = f"const int64_t st[{self.n}] = {{{st}}};"
            spread = None
            if any(c == 0 for c in coeffs):
                # Broadcast along a dimension: its distinct elements, spread in the local
                # store once loaded (kgen_load_bcast).
                tc = self._tile(dtype)
                issue = (f"{{ {decl} (void)kgen_load_bcast(&pl, &b, {t.ref}, {tc.ref}, {ptr}, "
                         f"st, {self._sym(off)}, {es}, {self.n}); }}")
                spread = (f"{{ {decl} kgen_spread(&pl, &b, {t.ref}, {tc.ref}, st, {es}, "
                          f"{self.n}); }}")
            else:
                issue = (f"{{ {decl} (void)kgen_load(&pl, &b, {t.ref}, {ptr}, st, "
                         f"{self._sym(off)}, {es}, {self.n}); }}")
            if any(k[0] == name for k in self.stored):
                # After a store to the same buffer in this box: in order, and waited for.
                self.lines += ["mtia_wait_all();", issue, "mtia_wait_all();"]
            else:
                self.prologue.append(issue)
            if spread is not None:
                self.lines.append(spread)  # after the loads' wait, before the tile's first use
            t.const_last = coeffs[-1] == 0
        elif self.mask is not None and (aff := affine(index, self.vars)) is not None and (
                extent := _storage_elements(name)) is not None:
            # A masked load at an affine index (padding, concatenation): one DMA of the box
            # when every address of the box lies inside the tensor (the masked-out lanes
            # read bytes that the select discards), else element by element.
            coeffs, off = aff
            st = ", ".join(self._sym(c) for c in coeffs)
            self.lines.append(f"{{ const int64_t st[{self.n}] = {{{st}}}; if (kgen_box_inside(&pl, "
                              f"&b, st, {self._sym(off)}, {self._sym(extent)})) {{ mtia_wait("
                              f"kgen_load(&pl, &b, {t.ref}, {ptr}, st, {self._sym(off)}, {es}, "
                              f"{self.n})); }} else {{")
            self._gather(t, ptr, index, es)
            self.lines.append("} }")
        else:
            self._gather(t, ptr, index, es)
        out = self._cast(t, compute_dtype(dtype))
        self.loaded[key] = out
        return out

    def _load_rows(self, name, index, dtype, ptr, key) -> Value:
        """An epilogue's load: the rows of the box, like a reduction's output."""
        aff = affine(index, self.vars) if self.mask is None else None
        if aff is None or any(c != 0 for c in aff[0][self.n - self.nred:]):
            raise Unsupported("an epilogue load that is not affine in the output rows")
        coeffs, off = aff
        t = self._tile(dtype, "row")
        st = ", ".join(self._sym(c) for c in coeffs)
        self.lines.append(f"{{ const int64_t st[{self.n}] = {{{st}}}; mtia_wait(kgen_load(&pl, &b, "
                          f"{t.ref}, {ptr}, st, {self._sym(off)}, {DTYPES[dtype][1]}, "
                          f"{self.n - self.nred})); }}")
        out = self._cast(t, compute_dtype(dtype))
        self.loaded[key] = out
        return out

    def begin_epilogue(self) -> None:
        if self.epilogue:
            return
        if not self.has_reduction:
            raise Unsupported("an epilogue without a reduction before it")
        self.epilogue = True
        self.lines.append("if (b.last) {")

    def end_epilogue(self) -> None:
        if self.epilogue:
            self.lines.append("}")
            self.epilogue = False
            # Computed only in the last box of each row: not a value after the epilogue.
            for key in self.computed_in_epilogue:
                self.computed.pop(key, None)
            self.computed_in_epilogue.clear()

    def _element_loop(self, body: List[str], pre: Sequence[str] = ()) -> None:
        """C that runs `body` for each element e of the box with v0.. set to its indices and
        the indirect indices read (after `pre`, which may skip the element)."""
        lines = ["for (uint64_t e = 0; e < b.count; ++e) {", "  uint64_t r_ = e;"]
        for i in reversed(range(self.n)):
            lines.append(f"  const int64_t v{i} = b.start[{i}] + (int64_t)(r_ % b.ext[{i}]);"
                         f" r_ /= b.ext[{i}];")
        lines.append("  (void)r_;")
        lines += [f"  (void)v{i};" for i in range(self.n)]
        lines += ["  " + x for x in pre]
        lines += self._read_indirect("  ")
        lines += ["  " + x for x in body]
        lines.append("}")
        self.lines += lines

    def _read_indirect(self, indent: str) -> List[str]:
        """C that reads every indirect index at element e (wrapped if negative); an index out
        of range ends the kernel with status BAD_SHAPE before anything is read with it."""
        ctypes = {torch.int64: "int64_t", torch.int32: "int32_t", torch.int8: "int8_t"}
        lines = []
        for sym, (src, size, wrap) in self.indirect.items():
            v, bound = f"ind_{sym.name}", self._sym(size)
            lines.append(f"int64_t {v} = ((const {ctypes[src.dtype]}*){src.ref})[e];")
            if wrap:
                lines.append(f"if ({v} < 0) {v} += {bound};")
            # DMAs of earlier elements may be in flight: they complete before the kernel ends.
            lines += [f"if ({v} < 0 || {v} >= {bound}) {{ mtia_wait_all(); "
                      "return MTIA_KSTATUS_BAD_SHAPE; }",
                      f"(void){v};"]
        return [indent + x for x in lines]

    def _gather(self, t: Value, ptr: str, index, es: int) -> None:
        self.gathers += 1
        step = self._row_step(index)
        if step is not None:
            self._gather_rows(t, ptr, index, es, step)
            return
        pre = []
        if self.mask is not None:
            pre.append(f"if (!((const uint8_t*){self.mask.ref})[e]) {{ for (unsigned z = 0; "
                       f"z < {es}u; ++z) ((uint8_t*){t.ref})[e * {es}u + z] = 0; continue; }}")
        # Every element's DMA in flight at once, and one wait.
        self._element_loop([f"(void)mtia_dma_in((uint8_t*){t.ref} + e * {es}u, {ptr} + "
                            f"(uint64_t)({self._sym(index)} * {es}), {es}u);"], pre)
        self.lines.append("mtia_wait_all();")

    def _row_step(self, index):
        """The element step of `index` along the innermost loop dimension when the rest of
        the index does not change along it (so a row of the box is one strided DMA), else
        None."""
        if self.n < 2:
            return None
        last = self.vars[-1]
        index = sympy.expand(sympy.sympify(index))
        step = sympy.Integer(0)
        for term in sympy.Add.make_args(index):
            if not term.has(last):
                for sym in term.free_symbols:
                    if sym in self.indirect and not self.indirect[sym][0].const_last:
                        return None
                continue
            c = sympy.cancel(term / last)
            if c.has(last) or any(v in c.free_symbols for v in self.vars) or any(
                    sym in self.indirect for sym in c.free_symbols):
                return None
            step += c
        if step.is_number and step < 0:
            return None
        return step

    def _gather_rows(self, t: Value, ptr: str, index, es: int, step) -> None:
        """A gather whose index moves by `step` elements along the innermost dimension: one
        strided DMA per row of the box (a stride of 0 repeats one element), all in flight at
        once. A masked row is read whole when none of its lanes is masked, zeroed when all
        are, and element by element otherwise (a masked lane's address may be outside the
        tensor); which rows are which, the RE finds (the min and max of each mask row)."""
        n = self.n
        lines = [f"{{ const uint64_t il = b.ext[{n - 1}]; const uint64_t nr = b.count / il;",
                 f"  const int64_t step = {self._sym(step)};"]
        mask = self.mask.ref if self.mask is not None else None
        if mask is not None:
            lo, hi = self._tile(torch.bool), self._tile(torch.bool)
            for op, out in (("MIN", lo), ("MAX", hi)):
                lines.append(f"  mtia_wait(mtia_reduce(MTIA_PE_RE_{op}, MTIA_PE_DT_BOOL, "
                             f"MTIA_PE_DT_BOOL, 1, 0, {out.ref}, {mask}, (uint32_t)nr, "
                             "(uint32_t)il, (uint32_t)il));")
        lines += ["  for (uint64_t row = 0; row < nr; ++row) {",
                  "    const uint64_t e = row * il;",
                  "    uint64_t r_ = e;"]
        for i in reversed(range(n)):
            lines.append(f"    const int64_t v{i} = b.start[{i}] + (int64_t)(r_ % b.ext[{i}]);"
                         f" r_ /= b.ext[{i}];")
        lines += [f"    (void)v{i};" for i in range(n)]
        if mask is not None:
            zero_dt = {1: "INT8", 2: "FP16", 4: "INT32", 8: "INT64"}[es]
            lines += [f"    if (!((const uint8_t*){hi.ref})[row]) {{ kse_fill(MTIA_PE_DT_"
                      f"{zero_dt}, (uint8_t*){t.ref} + e * {es}u, 0, (uint32_t)il); continue; }}"]
        # The indirect indices of the row's first element (the same along the row).
        lines += self._read_indirect("    ")
        lines.append(f"    const int64_t base = {self._sym(index)};")
        full = (f"    if (((const uint8_t*){lo.ref})[row]) {{" if mask is not None else "    {")
        lines += [full,
                  f"      const int64_t ds[1] = {{{es}}}; const int64_t ss[1] = {{step * {es}}};",
                  "      const uint64_t sz[1] = {il};",
                  f"      (void)kdma(kaddr({t.ref}) + e * {es}u, MTIA_PE_SPACE_LOCAL, ds, "
                  f"{ptr} + (uint64_t)(base * {es}), MTIA_PE_SPACE_DEVICE, ss, sz, 1, {es}u);",
                  "    }"]
        if mask is not None:
            lines += ["    else {",
                      "      for (uint64_t z = 0; z < il; ++z) {",
                      f"        if (((const uint8_t*){mask})[e + z]) (void)mtia_dma_in("
                      f"(uint8_t*){t.ref} + (e + z) * {es}u, {ptr} + (uint64_t)((base + "
                      f"(int64_t)z * step) * {es}), {es}u);",
                      f"        else for (unsigned q = 0; q < {es}u; ++q) ((uint8_t*){t.ref})"
                      f"[(e + z) * {es}u + q] = 0;",
                      "      }",
                      "    }"]
        lines += ["  }", "  mtia_wait_all();", "}"]
        self.lines += lines

    def indirect_indexing(self, x: Value, size, check=True, wrap_neg=True):
        if self.epilogue:
            raise Unsupported("an indirect index in an epilogue")
        if x.kind == "imm":
            return sympy.Integer(self._imm_value(x))
        if x.dtype not in INTS or x.shape != "elem":
            raise Unsupported("an indirect index that is not an integer tile")
        s = sympy.Symbol(f"ind{len(self.indirect)}", integer=True)
        self.indirect[s] = (x, sympy.sympify(size), bool(wrap_neg))
        return s

    def check_bounds(self, expr, size, lower, upper):
        return None  # indirect indices are checked where they are read

    def index_expr(self, index, dtype):
        check_dtype(dtype, "an index expression")
        index = self._simplify(index)
        if isinstance(index, (int, sympy.Integer)):
            return self.constant(int(index), dtype)
        if self.epilogue:
            raise Unsupported("index values in an epilogue")
        key = ("index", str(index))
        if key in self.computed:
            return self._cast(self.computed[key], compute_dtype(dtype))
        t = self._tile(torch.int64)
        self.computed[key] = t
        aff = affine(index, self.vars, negative=True)
        if aff is not None and not self.indirect_in(index):
            # On the SE from an iota tile (a few vector ops per dimension).
            if self.iota is None:
                self.iota, self.iota_tmp = self._tile(torch.int64), self._tile(torch.int64)
            coeffs, off = aff
            st = ", ".join(self._sym(c) for c in coeffs)
            self.lines.append(f"{{ const int64_t st[{self.n}] = {{{st}}}; kgen_affine_index(&pl, "
                              f"&b, (int64_t*){t.ref}, (const int64_t*){self.iota.ref}, "
                              f"(int64_t*){self.iota_tmp.ref}, st, {self._sym(off)}); }}")
        else:
            self._element_loop([f"((int64_t*){t.ref})[e] = {self._sym(index)};"])
        return self._cast(t, compute_dtype(dtype))

    def indirect_in(self, index) -> bool:
        return any(s in self.indirect for s in sympy.sympify(index).free_symbols)

    def to_dtype(self, x: Value, dtype, src_dtype=None, use_compute_types=True):
        return self._cast(x, compute_dtype(dtype))

    def to_dtype_bitcast(self, x, dtype, src_dtype):
        raise Unsupported("bitcasts have no SE form")

    def store(self, name: str, index, value: Value, mode=None):
        if mode is not None:
            raise Unsupported(f"stores with mode {mode}")
        if self.epilogue:
            return self._store_rows(name, index, value)
        dtype = V.graph.get_dtype(name)
        check_dtype(dtype, f"buffer {name}")
        index = self._simplify(index)
        aff = affine(index, self.vars)
        if aff is None:
            raise Unsupported(f"a store to {name} at a non-affine index {index}")
        value = self._materialize(value, "elem")
        removed = name in self.removed
        name = self._real(name)
        self.stored[(name, str(index))] = value
        # Loads of this buffer made before the store are stale now.
        self.loaded = {k: v for k, v in self.loaded.items() if k[0] != name}
        if removed:
            return None
        out = self._cast(value, dtype)
        coeffs, off = aff
        self.accesses.append((coeffs, DTYPES[dtype][1]))
        st = ", ".join(self._sym(c) for c in coeffs)
        self.lines.append(f"{{ const int64_t st[{self.n}] = {{{st}}}; (void)kgen_store(&pl, "
                          f"&b, {self._ptr(name)}, st, {self._sym(off)}, {out.ref}, "
                          f"{DTYPES[dtype][1]}, {self.n}); }}")
        return None

    def reduction(self, dtype, src_dtype, reduction_type, value: Value):
        if reduction_type not in REDUCTIONS:
            raise Unsupported(f"reduction '{reduction_type}'")
        if self.epilogue:
            raise Unsupported("a reduction after an epilogue")
        if self.nred == 0:
            raise Unsupported("a reduction outside a reduction kernel")
        self.has_reduction = True
        value = self._materialize(value, "elem")
        acc = "(b.first ? 0 : 1)"
        if reduction_type in WHOLE_ROW_REDUCTIONS:
            self.need_rows = True
            acc = "0"
        vin = value.dtype
        if reduction_type == "sum":
            out_dt = torch.float32 if vin in FLOATS else torch.int64
            if vin == torch.bool:
                value = self._cast(value, torch.int64)
                vin = torch.int64
            return self._re("SUM", value, out_dt, acc)
        if reduction_type in ("max", "min", "any"):
            if reduction_type == "any":
                value = self._cast(value, torch.bool)
            op = "MIN" if reduction_type == "min" else "MAX"
            return self._re(op, value, value.dtype, acc)
        if reduction_type in ("argmax", "argmin"):
            return self._re(reduction_type.upper(), value, torch.int64, acc)
        # welford_reduce: (mean, m2, weight) of each row, two passes over the tile.
        if vin not in FLOATS:
            value = self._cast(value, torch.float32)
        total = self._re("SUM", value, torch.float32, "0")
        count = self._tile(torch.float32, "row")
        self.lines.append(f"kse_fill(MTIA_PE_DT_FP32, {count.ref}, ku64_to_f32_bits(b.cols), "
                          "(uint32_t)rows);")
        mean = self._se("DIV", torch.float32, torch.float32, [total, count])
        spread = self._tile(torch.float32)
        self.lines.append(f"kexpand({spread.ref}, {mean.ref}, b.rows, b.cols, 1, 4);")
        centered = self._se("SUB", torch.float32, torch.float32, [value, spread])
        square = self._se("MUL", torch.float32, torch.float32, [centered, centered])
        m2 = self._re("SUM", square, torch.float32, "0")
        return mean, m2, count

    def _re(self, op: str, value: Value, out_dt: torch.dtype, acc: str) -> Value:
        out = self._tile(out_dt, "row")
        self.lines.append(f"mtia_wait(mtia_reduce(MTIA_PE_RE_{op}, "
                          f"MTIA_PE_DT_{DTYPES[value.dtype][0]}, MTIA_PE_DT_{DTYPES[out_dt][0]}, "
                          f"1, {acc} ? MTIA_PE_RE_ACCUMULATE : 0, {out.ref}, {value.ref}, "
                          f"(uint32_t)b.rows, (uint32_t)b.cols, (uint32_t)b.cols));")
        return out

    def _store_rows(self, name: str, index, value: Value) -> None:
        """Stores a row tile (a reduction's result, an epilogue's value): the box's unreduced
        dimensions, once its rows are complete (b.last)."""
        dtype = V.graph.get_dtype(name)
        check_dtype(dtype, f"buffer {name}")
        index = self._simplify(index)
        aff = affine(index, self.vars)
        if aff is None or any(c != 0 for c in aff[0][self.n - self.nred:]):
            raise Unsupported(f"a row store to {name} at {index}")
        value = self._materialize(value, "row")
        removed = name in self.removed
        name = self._real(name)
        self.stored[(name, str(index))] = value
        self.loaded = {k: v for k, v in self.loaded.items() if k[0] != name}
        if removed:
            return
        out = self._cast(value, dtype)
        coeffs, off = aff
        self.accesses.append((coeffs, DTYPES[dtype][1]))
        st = ", ".join(self._sym(c) for c in coeffs)
        store = (f"{{ const int64_t st[{self.n}] = {{{st}}}; (void)kgen_store(&pl, &b, "
                 f"{self._ptr(name)}, st, {self._sym(off)}, {out.ref}, {DTYPES[dtype][1]}, "
                 f"{self.n - self.nred}); }}")
        # Inside an epilogue the whole block is already under b.last.
        self.lines += [store] if self.epilogue else ["if (b.last) {", "  " + store, "}"]

    def store_reduction(self, name: str, index, value: Value):
        self._store_rows(name, index, value)

    def masked(self, mask: Value, body, other):
        if self.epilogue:
            raise Unsupported("a masked load in an epilogue")
        if mask.kind == "imm":
            raise Unsupported("a constant mask")
        outer = self.mask
        mask = self._cast(mask, torch.bool)
        if outer is not None:
            # A masked body inside another (circular padding): loads need both.
            mask = self._compare("LAND", outer, mask)
        self.mask = mask
        try:
            result = body()
        finally:
            self.mask = outer
        result = getattr(result, "value", result)  # ops.* results are wrapped (OpsValue)
        if isinstance(result, tuple):
            raise Unsupported("a masked body with several results")
        other_v = self.constant(other, result.dtype) if not isinstance(other, Value) else other
        return self.where(mask, result, other_v)

    def where(self, cond: Value, a: Value, b: Value):
        cond = self._cast(cond, torch.bool)
        if not isinstance(a, Value):
            a = self.constant(a, b.dtype)
        if not isinstance(b, Value):
            b = self.constant(b, a.dtype)
        a, b, dt = self._same(a, b)
        cond = self._materialize(cond, self._shape_of(a, b, cond))
        return self._se("SELECT", dt, dt, [cond, a, b])

    def _unary(self, op: str, x: Value):
        if op in FLOAT_ONLY and x.dtype not in FLOATS:
            x = self._cast(x, torch.float32)
        if op == "BNOT" and x.dtype not in INTS + (torch.bool,):
            raise Unsupported("bitwise_not of a float")
        return self._se(op, x.dtype, x.dtype, [x])

    def _binary(self, op: str, a: Value, b: Value):
        a, b, dt = self._same(a, b)
        if op in FLOAT_ONLY and dt not in FLOATS:
            a, b, dt = self._cast(a, torch.float32), self._cast(b, torch.float32), torch.float32
        if op in ("BAND", "BOR", "BXOR", "SHL", "SHR") and dt in FLOATS:
            raise Unsupported(f"{op.lower()} of floats")
        if dt == torch.bool and op in ("ADD", "SUB", "MUL", "DIV", "MIN", "MAX"):
            a, b, dt = self._cast(a, torch.int8), self._cast(b, torch.int8), torch.int8
            return self._cast(self._se(op, dt, dt, [a, b]), torch.bool)
        return self._se(op, dt, dt, [a, b])

    def _compare(self, op: str, a: Value, b: Value):
        a, b, dt = self._same(a, b)
        return self._se(op, dt, torch.bool, [a, b])

    def _bool_or_bits(self, logical: str, bitwise: str, a: Value, b: Value):
        # Inductor's and_/or_/xor are Python's &, | and ^: logical on masks, bitwise on ints.
        if a.dtype == torch.bool and b.dtype == torch.bool:
            return self._compare(logical, a, b)
        return self._binary(bitwise, a, b)

    def and_(self, a, b):
        return self._bool_or_bits("LAND", "BAND", a, b)

    def or_(self, a, b):
        return self._bool_or_bits("LOR", "BOR", a, b)

    def xor(self, a, b):
        return self._bool_or_bits("LXOR", "BXOR", a, b)

    def signbit(self, x):
        # The sign bit without a bitcast: copysign(1, x) is -1 exactly when it is set (-0.0
        # and negative NaNs included).
        if x.dtype not in FLOATS:
            return self._compare("LT", x, self.constant(0, x.dtype))
        one = self._binary("COPYSIGN", self.constant(1.0, x.dtype), x)
        return self._compare("LT", one, self.constant(0.0, x.dtype))

    def _poly(self, w: Value, coeffs) -> Value:
        """coeffs[0] * w^(n-1) + ... + coeffs[-1] by Horner's rule on the SE."""
        p = self.constant(coeffs[0], w.dtype)
        for c in coeffs[1:]:
            p = self._binary("ADD", self._binary("MUL", p, w), self.constant(c, w.dtype))
        return p

    def erfinv(self, x):
        # Giles' single-precision approximation (two polynomials in w = -log(1 - x^2)), with
        # erfinv(+-1) = +-inf set exactly: the polynomial alone gives -inf at both ends.
        if x.dtype not in FLOATS:
            x = self._cast(x, torch.float32)
        one = self.constant(1.0, x.dtype)
        w = self._unary("NEG", self._unary("LOG", self._binary(
            "MUL", self._binary("SUB", one, x), self._binary("ADD", one, x))))
        central = self._poly(self._binary("SUB", w, self.constant(2.5, x.dtype)), (
            2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
            -0.00125372503, -0.00417768164, 0.246640727, 1.50140941))
        tail = self._poly(self._binary("SUB", self._unary("SQRT", w),
                                       self.constant(3.0, x.dtype)), (
            -0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
            -0.0076224613, 0.00943887047, 1.00167406, 2.83297682))
        p = self.where(self._compare("LT", w, self.constant(5.0, x.dtype)), central, tail)
        at_end = self._compare("EQ", self._unary("ABS", x), one)
        return self.where(at_end, self._binary("MUL", x, self.constant(float("inf"), x.dtype)),
                          self._binary("MUL", p, x))

    def logical_not(self, x):
        return self._se("LNOT", x.dtype, torch.bool, [x])

    def isnan(self, x):
        return self._se("NE", x.dtype, torch.bool, [x, x])

    def isinf(self, x):
        a = self._unary("ABS", x)
        return self._compare("EQ", a, self.constant(float("inf"), x.dtype))

    def square(self, x):
        return self._binary("MUL", x, x)

    def identity(self, x):
        return x

    def silu(self, x):
        return self._unary("SILU", x)

    def sigmoid(self, x):
        return self._unary("SIGMOID", x)

    def fma(self, a, b, c):
        return self._binary("ADD", self._binary("MUL", a, b), c)

    def neg(self, x):
        if x.dtype == torch.bool:
            raise Unsupported("neg of bool")
        return self._unary("NEG", x)


def _install_ops() -> None:
    for name, op in UNARY.items():
        if not hasattr(KernelBuilder, name):
            setattr(KernelBuilder, name, lambda self, x, _op=op: self._unary(_op, x))
    for name, op in BINARY.items():
        setattr(KernelBuilder, name, lambda self, a, b, _op=op: self._binary(_op, a, b))
    for name, op in COMPARE.items():
        setattr(KernelBuilder, name, lambda self, a, b, _op=op: self._compare(_op, a, b))
    # Inductor's libdevice_* spellings of the same functions.
    for name in list(UNARY) + list(BINARY):
        if hasattr(KernelBuilder, name):
            setattr(KernelBuilder, f"libdevice_{name}", getattr(KernelBuilder, name))


_install_ops()


def render(name: str, kb: KernelBuilder) -> Tuple[str, List[str], List[sympy.Symbol]]:
    """The C source of a kernel from a builder that ran its bodies; returns the source, the
    buffer names (pointer arguments, then 0-d CPU tensors passed by value, in order) and the
    size symbols (i64 arguments after them)."""
    size_exprs = [kb._sym(s) for s in kb.sizes]  # may add size symbols: first
    buffers = list(kb.buffers.items())
    scalars = list(kb.scalars.items())
    symbols = list(kb.symbols.items())
    sig = " ".join([f"{c}:ptr" for _, c in buffers] + [f"{c}:i64" for _, c in scalars] +
                   [f"{c}:i64" for _, c in symbols])
    nargs = len(buffers) + len(scalars) + len(symbols)
    elem_bytes = sum(es for _, es, shape in kb.tiles if shape == "elem")
    row_bytes = sum(es for _, es, shape in kb.tiles if shape == "row")
    # Each tile buffer is 64-byte aligned: budget the padding.
    pad = 64 * len(kb.tiles)
    out = ['#include "kgen.h"', "",
           f'MTIA_KERNEL({name}, "{sig}");',
           f"int {name}(const uint64_t* args, uint64_t args_bytes) {{",
           f"  if (args_bytes != {nargs * 8}u) return MTIA_KSTATUS_BAD_ARG_BYTES;",
           "  (void)args;"]
    for i, (_, c) in enumerate(buffers):
        out.append(f"  const uint64_t {c} = args[{i}];")
    for j, (_, c) in enumerate(scalars):
        out.append(f"  const uint64_t {c} = args[{len(buffers) + j}];")
    for j, (_, c) in enumerate(symbols):
        out.append(f"  const int64_t {c} = (int64_t)args[{len(buffers) + len(scalars) + j}];")
    out.append("  kgen_plan pl;")
    out.append(f"  pl.n = {kb.n};")
    out.append(f"  pl.nred = {kb.nred};")
    for i, e in enumerate(size_exprs):
        out.append(f"  pl.size[{i}] = {e};")
    out.append("  karena ar;")
    out.append("  karena_init(&ar);")
    out.append(f"  const uint64_t budget = karena_left(&ar) > {pad}u ? karena_left(&ar) - {pad}u "
               ": 0;")
    out.append(f"  const int st_ = kgen_plan_init(&pl, budget, {elem_bytes}u, {row_bytes}u, "
               f"{1 if kb.need_rows else 0});")
    out.append("  if (st_ != MTIA_KSTATUS_OK) return st_;")
    for t, es, shape in kb.tiles:
        count = "pl.cap" if shape == "elem" else "pl.rows_cap"
        out.append(f"  void* {t} = kalloc(&ar, {count} * {es}u);")
        out.append(f"  if ({t} == 0) return MTIA_KSTATUS_NO_LOCAL_STORE;")
    if kb.iota is not None:
        out.append(f"  kgen_iota((int64_t*){kb.iota.ref}, pl.cap);")
    out.append("  kgen_box b;")
    out.append("  for (int more = kgen_first(&pl, &b); more; more = kgen_next(&pl, &b)) {")
    out.append("    const uint64_t n = b.count;")
    out.append("    const uint64_t rows = b.rows;")
    out.append("    (void)n;")
    out.append("    (void)rows;")
    # Stores of the previous box read their tiles until they complete: wait before this box's
    # loads overwrite any of them; then every load in flight at once, and one wait.
    out.append("    mtia_wait_all();")
    out += ["    " + line for line in kb.prologue]
    out.append("    mtia_wait_all();")
    out += ["    " + line for line in kb.lines]
    out.append("  }")
    out.append("  mtia_wait_all();")
    out.append("  return MTIA_KSTATUS_OK;")
    out.append("}")
    return ("\n".join(out) + "\n", [b for b, _ in buffers] + [c for c, _ in scalars],
            [s for s, _ in symbols])


def space_of(node) -> Tuple[List, int]:
    """The iteration space of a scheduler node: its sizes then its reduction sizes."""
    sizes, rsizes = node.get_ranges()
    return list(sizes) + list(rsizes), len(rsizes)


def numel(sizes) -> sympy.Expr:
    return sympy_product(sizes) if sizes else sympy.Integer(1)
