"""Tensor cores: a loop nest marked ``attrs["mma"]`` (``tensor_core``; its
legality: :mod:`tiramisu_py.analysis.gpu_mma`) printed as one
``mma.sync.m16n8k16`` per warp with its operands loaded by ``ldmatrix``.

The nest is ``for k (16) { for i (2) { for j (2) { C[c(i, j)] = C[c(i, j)]
+ A[a] * B[b] } } }`` inside the lane loops ``lane.y`` (g) and ``lane.x``
(t) of a warp-tiled kernel, ``C`` the thread's sums (after
``accumulate_locally``: registers) with row ``8i + g`` and column ``2t + j``
of the 16 x 8 tile.  The fragments:

* ``A`` (16 x 16, row major for the mma): ``ldmatrix.x4`` from a shared tile
  whose ``k`` is contiguous (lane ``L`` gives row ``L % 16``, columns ``8 *
  (L / 16)`` ..), or ``.trans`` where its rows are (lane ``L`` gives k ``L %
  8 + 8 * (L / 16)``, rows ``8 * ((L / 8) % 2)`` ..);
* ``B`` (16 x 8, column major): ``ldmatrix.x2.trans`` where its columns are
  contiguous (lane ``L`` gives k ``L % 16``), plain ``.x2`` where its ``k``
  is (column ``L % 8``, k ``8 * ((L / 8) % 2)`` ..);
* ``C``: the four sums ``(i, j)`` = (0, 0), (0, 1), (1, 0), (1, 1): the
  thread's own registers, read before and written after the instruction.

Each lane's row address is the operand's index with the loop variables
replaced as above; it must be 16-byte aligned (8 halves: the offset and the
row strides multiples of 8, proved as for vector accesses, else refused).
The instruction needs all 32 lanes: a nest under a guard that may exclude
lanes (a thread loop's bound, an If inside the thread loops: a partial tile)
is refused naming the command.  Fragments are loaded for each instruction
(nvcc keeps volatile asm as written: 2 ldmatrix per mma)."""
from __future__ import annotations

from .. import ir
from .vectors import coefficient, divisible, flat_index, lone_store, substitute

KINDS = {"bfloat16": 0, "float16": 1}
DEVICE_HELPER = """\
template <int N, bool T> static __device__ __forceinline__ void tpy_ldmatrix(unsigned *r,
                                                                             const void *p) {
  unsigned s = (unsigned)__cvta_generic_to_shared(p);
  if (N == 4 && !T)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
  else if (N == 4)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
  else if (!T)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(s) : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(s) : "memory");
}
template <int K> static __device__ __forceinline__ void tpy_mma_16816(float *c, const unsigned *a,
                                                                      const unsigned *b) {
  if (K == 0)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}"""


class MmaError(ValueError):
    """A marked nest the printer cannot print as an mma."""


def _lane():
    return ir.Var("tpy_lane")


def _b(op, a, b):
    return ir.Binary(op, a, b if isinstance(b, ir.Expr) else ir.const(b), "int64")


class MmaPrinter:
    def __init__(self, em, s):
        self.em, self.s = em, s
        self.what = s.attrs["mma"].get("command", "tensor_core")
        self.consts = dict(em.fn.constants)

    def refuse(self, why):
        raise MmaError(f"{self.what} cannot run on the tensor cores: {why}")

    def nest(self):
        """(k, outer loop, inner loop, store) of the marked nest."""
        s = self.s
        loops = [s]
        body = s.body
        while True:
            while isinstance(body, ir.Block) and len(body.stmts) == 1:
                body = body.stmts[0]
            if isinstance(body, ir.For):
                loops.append(body)
                body = body.body
                continue
            break
        store = lone_store(body)
        if len(loops) != 3 or store is None:
            self.refuse("the marked loops must hold one update and nothing else")
        for lp, n in zip(loops, (16, 2, 2)):
            if not isinstance(lp.lo, ir.Const) or int(lp.step) != 1 \
                    or not _const_extent(lp, n):
                self.refuse(f"loop {lp.var!r} must run exactly {n} times from a constant "
                            "(a full tile)")
        return loops, store

    def operands(self, store, k, x, y):
        loads = [e for e in ir.walk_exprs(store.value) if isinstance(e, ir.Load)
                 and e.dtype in KINDS]
        if len(loads) != 2 or loads[0].dtype != loads[1].dtype:
            self.refuse("the update must multiply two bfloat16 or float16 tile reads")
        flat = [flat_index(self.em.shapes, ld.array, ld.index) for ld in loads]
        # A uses the rows (lane.y and one of the two loops), B the columns
        ly, lx = self.em.lanes.get("lane.y"), self.em.lanes.get("lane.x")
        if ly is None or lx is None:
            self.refuse("it is not inside lane.y and lane.x loops")
        uses = [ir.free_vars(f) for f in flat]
        a = next((n for n in (0, 1) if ly in uses[n] and lx not in uses[n]), None)
        if a is None or ly in uses[1 - a] or lx not in uses[1 - a]:
            self.refuse("one operand must follow the rows (lane.y) and the other the columns "
                        "(lane.x)")
        i = x if x.var in uses[a] else y
        j = y if i is x else x
        return (loads[a], flat[a]), (loads[1 - a], flat[1 - a]), i, j, ly, lx

    def address(self, name, flat, rows, contiguous, lanes):
        """The lane's row address of a fragment: ``rows`` -> lane expressions
        (``lanes``: var -> expr), ``contiguous`` the variable along a row."""
        if coefficient(flat, contiguous, self.consts) != 1:
            return None
        base = flat
        for v in set(rows) | {contiguous} | set(lanes):
            base = substitute(base, v, ir.const(0))
        for v in rows:
            c = coefficient(flat, v, self.consts)
            if c is None or c % 8:
                self.refuse(f"{name}'s rows are {c} elements apart; ldmatrix needs 16-byte "
                            "rows (multiples of 8 halves)")
        if not divisible(base, 8, self.consts):
            self.refuse(f"{name}'s tile is not provably 16-byte aligned at each fragment row")
        out = flat
        for v, e in lanes.items():
            out = substitute(out, v, e)
        return out

    def analyse(self):
        """The fragments' addresses and layouts and the sums' registers."""
        em = self.em
        if em.divergent:
            self.refuse("it sits under a guard that may leave out lanes of a warp (a partial "
                        "tile); the instruction needs all 32")
        (k, x, y), store = self.nest()
        if em.array_dtype(store.array) != "float32":
            self.refuse("the sums must be float32 (in registers: accumulate_locally)")
        (la, fa), (lb, fb), i, j, ly, lx = self.operands(store, k, x, y)
        L = _lane()
        kv, iv, jv = k.var, i.var, j.var
        # A: k contiguous (plain) or rows contiguous (transposed)
        a_addr = self.address(la.array, fa, [ly, iv], kv, {
            ly: _b("mod", L, 8), iv: _b("mod", _b("div", L, 8), 2), kv: _b("mul", _b("div", L, 16), 8)})
        a_trans = a_addr is None
        if a_trans:
            a_addr = self.address(la.array, fa, [kv, iv], ly, {
                ly: ir.const(0), iv: _b("mod", _b("div", L, 8), 2),
                kv: _b("add", _b("mod", L, 8), _b("mul", _b("div", L, 16), 8))})
        # B: columns contiguous (transposed) or k contiguous (plain)
        b_addr = self.address(lb.array, fb, [kv], jv, {
            kv: _b("mod", L, 16), lx: ir.const(0), jv: ir.const(0)})
        b_trans = b_addr is not None
        if not b_trans:
            b_addr = self.address(lb.array, fb, [lx, jv], kv, {
                lx: _b("div", _b("mod", L, 8), 2), jv: _b("mod", L, 2),
                kv: _b("mul", _b("mod", _b("div", L, 8), 2), 8)})
        if a_addr is None or b_addr is None:
            self.refuse("an operand tile is contiguous neither along k nor along its rows or "
                        "columns (ldmatrix reads 16-byte rows)")
        em.uses.add("mma")
        slots = []
        for ii, jj in ((0, 0), (0, 1), (1, 0), (1, 1)):
            idx = tuple(substitute(substitute(e, iv, _plus(i.lo, ii)), jv, _plus(j.lo, jj))
                        for e in store.index)
            slots.append(em.access(store.array, idx))
        self.a = (la, a_addr, a_trans)
        self.b = (lb, b_addr, b_trans)
        self.slots, self.kind, self.names = slots, KINDS[la.dtype], (kv, iv, jv)
        return self

    def load(self, ind, which, dest):
        ld, addr, trans = self.a if which == "a" else self.b
        n = 4 if which == "a" else 2
        self.em.out(ind, f"tpy_ldmatrix<{n}, {'true' if trans else 'false'}>({dest}, "
                         f"&{self.em.flat_ref(ld.array, addr)});")

    def call(self, ind, a, b):
        em = self.em
        em.out(ind, f"{{  /* tensor core: mma.sync m16n8k16 over {', '.join(self.names)} */")
        em.out(ind + 1, f"float tpy_c[4] = {{{', '.join(self.slots)}}};")
        em.out(ind + 1, f"tpy_mma_16816<{self.kind}>(tpy_c, {a}, {b});")
        for n, ref in enumerate(self.slots):
            em.out(ind + 1, f"{ref} = tpy_c[{n}];")
        em.out(ind, "}")

    def print(self, ind):
        """One instruction with its own fragment loads."""
        self.analyse()
        em = self.em
        em.out(ind, "{")
        em.out(ind + 1, "const int64_t tpy_lane = (int64_t)threadIdx.x % 32;")
        em.out(ind + 1, "unsigned tpy_a[4], tpy_b[2];")
        self.load(ind + 1, "a", "tpy_a")
        self.load(ind + 1, "b", "tpy_b")
        self.call(ind + 1, "tpy_a", "tpy_b")
        em.out(ind, "}")


def hoisted(em, s, ind) -> bool:
    """Prints the loops from ``s`` down to a marked nest, each indexing one
    operand only (the instructions of a warp tile: ``i_m`` rows of A
    fragments, ``j_m`` columns of B ones), with each fragment loaded once:
    ``tpy_a[i_m]``, ``tpy_b[j_m]``, then the instructions.  False (nothing
    printed) when ``s`` does not start such a chain."""
    chain, body = [], s
    while isinstance(body, ir.For) and "mma" not in body.attrs:
        if not isinstance(body.lo, ir.Const) or int(body.step) != 1:
            return False
        ext = body.attrs.get("full_extent")
        if ext is None:
            if not isinstance(body.hi, ir.Const):
                return False
            ext = int(body.hi.value) - int(body.lo.value)
        elif not (isinstance(body.hi, ir.Const) and int(body.hi.value) >= int(body.lo.value) + ext):
            return False
        chain.append((body, int(ext)))
        body = body.body
        while isinstance(body, ir.Block) and len(body.stmts) == 1:
            body = body.stmts[0]
    if not chain or not isinstance(body, ir.For) or "mma" not in body.attrs:
        return False
    mp = MmaPrinter(em, body).analyse()
    uses = {w: ir.free_vars(addr) for w, (_, addr, _) in (("a", mp.a), ("b", mp.b))}
    side = {}
    for lp, _ in chain:
        owners = [w for w in ("a", "b") if lp.var in uses[w]]
        if len(owners) != 1:
            return False
        side[lp.var] = owners[0]
    em.out(ind, "{")
    em.out(ind + 1, "const int64_t tpy_lane = (int64_t)threadIdx.x % 32;")
    refs = {}
    for w, regs in (("a", 4), ("b", 2)):
        mine = [(lp, n) for lp, n in chain if side[lp.var] == w]
        size = 1
        flat = ir.const(0)
        for lp, n in mine:
            at = ir.Var(lp.var) if int(lp.lo.value) == 0 else _b("sub", ir.Var(lp.var), lp.lo)
            flat = at if size == 1 else _b("add", _b("mul", flat, n), at)
            size *= n
        em.out(ind + 1, f"unsigned tpy_{w}[{size}][{regs}];")
        refs[w] = f"tpy_{w}[{em.expr(flat)}]"
        _unrolled(em, ind + 1, mine, lambda depth: mp.load(depth, w, refs[w]))
    _unrolled(em, ind + 1, chain, lambda depth: mp.call(depth, refs["a"], refs["b"]))
    em.out(ind, "}")
    return True


def _unrolled(em, ind, loops, body):
    """``loops`` [(loop, extent)] printed fully unrolled around ``body(indent)``."""
    depth = ind
    for lp, n in loops:
        em.out(depth, "#pragma unroll")
        em.out(depth, f"for (int64_t {lp.var} = {int(lp.lo.value)}; {lp.var} < "
                      f"{int(lp.lo.value) + n}; {lp.var}++) {{")
        depth += 1
    body(depth)
    for _ in loops:
        depth -= 1
        em.out(depth, "}")


def _plus(e, n):
    return ir.const(int(e.value) + n) if isinstance(e, ir.Const) else _b("add", e, n)


def _const_extent(lp, n):
    lo = int(lp.lo.value)
    full = lp.attrs.get("full_extent")
    if full is not None:
        return int(full) == n and isinstance(lp.hi, ir.Const) and int(lp.hi.value) >= lo + n
    return isinstance(lp.hi, ir.Const) and int(lp.hi.value) - lo == n
