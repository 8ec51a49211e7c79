"""The hostile-argument suite's generator and runner (issue 19), run in a child process.

From each registered op's valid cases, one argument at a time is replaced by a bad or odd
value (wrong types, dtypes and schemes, zero-size, extreme and non-finite qparams, 0-stride,
negative-stride, unaligned and read-only arrays, out-of-range ints). Each mutated call runs on
both backends; it must return the same on both (and leave its inputs alone), or raise
ValueError/TypeError on both, naming the argument. Anything else (another exception, an
IndexError of the bounds-checked build, a crash, a hang) is a failure.

QTensor methods and constructors (family "qtensor", METHOD_SPECS) get the same treatment.

Protocol (stdout, one tab-separated line each): "S <i> <op> <label>" before case i runs,
"F <i> <op> <label> <why>" for a failure, "D <n>" when all n cases of the family ran. The
parent (tests/test_hostile.py) restarts after a crash at the case after the one last started.
"""
import faulthandler
import fractions
import inspect
import os
import re
import signal
import sys
import warnings
import zlib

import numpy as np

import qops
from qops._qtensor import QTensor
from qops._registry import Case, OpSpec, all_specs
from qops._registry import _util as u

#: valid cases taken per op: the smallest non-empty one, and the smallest of the most dims
BASE_CASES = 2


# -- values -------------------------------------------------------------------------------

_SKIP = object()


def _qt(data, like, scale=None, zero_point=None):
    """A per-tensor QTensor over `data` (not copied) with like's qparams."""
    return qops.make_per_tensor_quantized_tensor(
        data, like._scale if scale is None else scale,
        like._zero_point if zero_point is None else zero_point)


def _unaligned(a, offset=1):
    """A copy of `a` starting `offset` bytes past a 64-byte boundary."""
    a = np.ascontiguousarray(a)
    buf = np.zeros(a.nbytes + 128, np.uint8)
    start = (-buf.ctypes.data) % 64 + offset
    out = buf[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _readonly(a):
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


def _zero_stride(a):
    """An array of a's shape whose first non-unit axis has stride 0 (np.broadcast_to)."""
    if a.ndim == 0 or a.size == 0:
        return None
    ax = next((i for i, n in enumerate(a.shape) if n > 1), None)
    if ax is None:
        return None
    return np.broadcast_to(np.take(a, [0], axis=ax), a.shape)


def _neg_stride(a):
    if a.ndim == 0:
        return None
    return np.ascontiguousarray(a[..., ::-1])[..., ::-1]


def _strided(a):
    """a's values in every other element of a larger buffer (a positive, non-unit stride)."""
    if a.ndim == 0:
        return None
    big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    big[..., ::2] = a
    return big[..., ::2]


def _fortran(a):
    return np.asfortranarray(a) if a.ndim >= 2 else None


def _channels_last(a):
    return u._layout(a, "cl") if a.ndim >= 3 else None


def _zero_size(a, axis):
    if a.ndim == 0:
        return None
    axis = axis % a.ndim
    return np.take(a, [], axis=axis)


BAD_INTS = [0, -1, -2**31, 2**31, 2**63, -2**63 - 1, 2**64, True, 2.0, 2.5, float("nan"),
            None, "1", np.int64(2), np.uint64(2**64 - 1), np.int8(-1), np.array(2),
            np.array([2, 2]), (2,), [1, 2, 3, 4, 5, 6]]
BAD_FLOATS = [0.0, -1.0, -0.0, float("nan"), float("inf"), float("-inf"), 1e300, 3.5e38,
              3.4e38, 1e-45, 1e-300, True, "0.1", None, np.float32(0.25), 10**400, 2**64,
              np.array([0.1, 0.2]), np.array(0.25), fractions.Fraction(1, 4),
              fractions.Fraction(10**400), 1j]
BAD_BOOLS = [2, -1, None, "yes", 1.5, np.bool_(True), np.array(True), [True]]
BAD_STRS = ["bogus", "", None, 3, b"zeros"]
BAD_GENERIC = [0, -1, 2**63, 1.5, float("nan"), "x", [], np.zeros(3, np.float32), True]
BAD_DTYPES = ["quint8", None, np.uint8, 7, "float32"]


def _float_array_mutations(a):
    """Bad and odd versions of a float array argument."""
    out = [("float64", a.astype(np.float64)), ("float16", a.astype(np.float16)),
           ("int16", a.astype(np.int16)), ("bool", a.astype(bool)), ("list", a.tolist()),
           ("None", None), ("scalar 0-d", np.asarray(np.float32(1.5))),
           ("extra element", np.concatenate([a.ravel(), [1.0]]).astype(a.dtype)),
           ("readonly", _readonly(a)), ("unaligned", _unaligned(a, 1)),
           ("neg-stride", _neg_stride(a)), ("0-stride", _zero_stride(a)),
           ("strided", _strided(a)), ("object", a.astype(object)),
           ("big-endian", a.astype(a.dtype.newbyteorder(">")))]
    if a.size:
        for name, v in (("nan", np.nan), ("inf", np.inf), ("-inf", -np.inf), ("3e38", 3e38),
                        ("-1e30", -1e30), ("1e-45", 1e-45)):
            b = a.copy()
            b.flat[0] = v
            out.append((f"{name} value", b))
        out.append(("zero-size", _zero_size(a, 0)))
        if a.ndim >= 2:
            out.append(("fortran", _fortran(a)))
            out.append(("channels-last", _channels_last(a)))
            out.append(("extra dim", a[None]))
            out.append(("one dim less", a[0]))
    return [(n, v) for n, v in out if v is not None or n == "None"]


def _qtensor_mutations(q):
    """Bad and odd versions of a QTensor argument (per-tensor unless it is per-channel)."""
    a = q._int
    out = [("raw ndarray", a), ("float ndarray", q.dequantize()), ("list", a.tolist()),
           ("None", None), ("float", 3.0), ("bool", True)]
    per_tensor = q._axis is None

    def same(data, **kw):
        try:
            if per_tensor:
                return _qt(data, q, **kw)
            return qops.make_per_channel_quantized_tensor(data, q._scales, q._zero_points,
                                                          q._axis)
        except (ValueError, TypeError):
            return _SKIP            # the constructor refuses it: nothing to pass on

    # layouts of the same values
    for name, data in (("readonly", _readonly(a)), ("unaligned+1", _unaligned(a, 1)),
                       ("unaligned+3", _unaligned(a, 3)), ("neg-stride", _neg_stride(a)),
                       ("0-stride", _zero_stride(a)), ("strided", _strided(a)),
                       ("fortran", _fortran(a)), ("channels-last", _channels_last(a))):
        if data is not None:
            out.append((name, same(data)))
    # other dtypes and schemes
    for name, dt in (("as qint8", np.int8), ("as quint8", np.uint8), ("as qint32", np.int32)):
        if a.dtype != dt:
            data = np.clip(a.astype(np.int64), np.iinfo(dt).min, np.iinfo(dt).max).astype(dt)
            zp = 0
            out.append((name, qops.make_per_tensor_quantized_tensor(data, 0.1, zp)))
    if per_tensor and a.ndim >= 1 and a.shape[0] > 0:
        for axis in sorted({0, a.ndim - 1}):
            n = a.shape[axis]
            out.append((f"per-channel axis {axis}", qops.make_per_channel_quantized_tensor(
                a, np.linspace(0.05, 0.2, n), np.full(n, q._zero_point), axis)))
    out.append(("raw big-endian", a.astype(a.dtype.newbyteorder(">"))))
    if not per_tensor:
        out.append(("per-tensor", _qt(a, q, scale=0.1, zero_point=0)))
    # sizes and dims
    if a.ndim >= 1:
        out.append(("zero-size dim 0", same(_zero_size(a, 0))))
        out.append(("zero-size last dim", same(_zero_size(a, -1))))
        if per_tensor:
            out.append(("extra dim", same(a[None])))
            scalar = a.flat[0] if a.size else a.dtype.type(0)
            out.append(("0-d", _qt(np.asarray(scalar), q)))
            if a.ndim >= 2:
                out.append(("one dim less", same(a[0])))
            out.append(("5 extra dims", same(a.reshape((1,) * 5 + a.shape))))
    # extreme qparams (values the constructors accept)
    if per_tensor:
        info = np.iinfo(a.dtype)
        qmin, qmax = (info.min, info.max) if a.dtype != np.int32 else (-2**31, 2**31 - 1)
        for name, kw in (("scale 1e-38", dict(scale=1e-38)), ("scale 3e38", dict(scale=3e38)),
                         ("scale 1.4e-45", dict(scale=1.4e-45)),
                         ("zero_point qmin", dict(zero_point=int(qmin))),
                         ("zero_point qmax", dict(zero_point=int(qmax)))):
            try:
                out.append((name, _qt(a, q, **kw)))
            except (ValueError, TypeError):
                pass
    return [(n, v) for n, v in out if v is not _SKIP]


def _list_mutations(v):
    out = [("empty list", []), ("tuple", tuple(v)), ("None in list", list(v) + [None]),
           ("ndarray in list", [v[0]._int] + list(v[1:])), ("not a list", v[0]),
           ("generator", (t for t in v)), ("None", None)]
    for i, t in enumerate(v[:1]):
        for name, m in _qtensor_mutations(t):
            out.append((f"[{i}] {name}", list(v[:i]) + [m] + list(v[i + 1:])))
    for axis in (0, -1):            # every input empty along one axis
        try:
            out.append((f"all zero-size dim {axis}",
                        [_qt(_zero_size(t._int, axis), t) for t in v]))
        except (ValueError, TypeError, IndexError):
            pass
    if len(v) > 1:                  # the last one too (other code paths index from the end)
        i = len(v) - 1
        for name, m in _qtensor_mutations(v[i]):
            if isinstance(m, QTensor):
                out.append((f"[{i}] {name}", list(v[:i]) + [m]))
    return out


def _value_mutations(v, method=False):
    """(label, value) pairs replacing an argument whose valid value (or default) is v."""
    if isinstance(v, QTensor):
        if method:
            # a QTensor method's self: only other QTensors can be it
            return [(n, m) for n, m in _qtensor_mutations(v) if isinstance(m, QTensor)]
        return _qtensor_mutations(v)
    if isinstance(v, list) and v and all(isinstance(t, QTensor) for t in v):
        return _list_mutations(v)
    if isinstance(v, np.ndarray):
        return _float_array_mutations(v) if v.dtype.kind == "f" else [("None", None)]
    if isinstance(v, (bool, np.bool_)):
        return [(repr(b), b) for b in BAD_BOOLS]
    if isinstance(v, (int, np.integer)):
        return [(repr(b)[:40], b) for b in BAD_INTS]
    if isinstance(v, float):
        return [(repr(b)[:40], b) for b in BAD_FLOATS]
    if isinstance(v, str):
        return [(repr(b), b) for b in BAD_STRS]
    if isinstance(v, qops._dtypes.QDtype):
        return [(repr(b), b) for b in BAD_DTYPES] + [
            (d.name, d) for d in (qops.quint8, qops.qint8, qops.qint32) if d is not v]
    if isinstance(v, tuple):
        out = [("empty tuple", ()), ("list", list(v)), ("None", None)]
        if v:
            for b in (0, -1, -3, 2**31, 2**63, None, 1.5, True):
                out.append((f"[0]={b!r}", (b,) + tuple(v[1:])))
            out.append(("one more", tuple(v) + (v[-1],)))
        return out
    return [(repr(b)[:40], b) for b in BAD_GENERIC]


# -- cases --------------------------------------------------------------------------------

def _numel(case):
    n = 0
    for a in tuple(case.args) + tuple(case.kwargs.values()):
        if isinstance(a, QTensor):
            n += a.numel()
        elif isinstance(a, np.ndarray):
            n += a.size
        elif isinstance(a, list):
            n += sum(t.numel() for t in a if isinstance(t, QTensor))
    return n


def _first_qtensor_size(case):
    for a in case.args:
        if isinstance(a, QTensor):
            return a.numel()
        if isinstance(a, np.ndarray):
            return a.size
        if isinstance(a, list) and a and isinstance(a[0], QTensor):
            return a[0].numel()
    return 1


def base_cases(spec):
    """The op's smallest non-empty valid cases (distinct in argument shapes)."""
    if spec.family == "qtensor":
        return spec.cases()          # a few hand-picked calls, all kept
    cases = [c for c in spec.cases() if _first_qtensor_size(c) > 0 and _numel(c) <= 5000]
    cases.sort(key=_numel)
    if not cases:
        return []
    # the smallest, then the smallest of the most dims (other paths: rows and columns, planes)
    chosen = [cases[0]]
    rest = [c for c in cases[1:] if _shapes(c) != _shapes(cases[0])]
    if rest and BASE_CASES > 1:
        most = max(_ndim(c) for c in rest)
        chosen.append(next(c for c in rest if _ndim(c) == most))
    return chosen


def _shapes(case):
    return tuple(getattr(a, "shape", None) if not isinstance(a, list) else
                 tuple(getattr(t, "shape", None) for t in a) for a in case.args)


def _ndim(case):
    a = case.args[0]
    if isinstance(a, list):
        a = a[0] if a else None
    return getattr(a, "ndim", 0)


def _params(spec):
    return inspect.signature(spec.op).parameters


def _index(spec, case):
    """The index of `case` in spec.cases() (cases are rebuilt equal by every call)."""
    return next(i for i, c in enumerate(spec.cases()) if c.label == case.label
                and _shapes(c) == _shapes(case))


def _is_method(spec):
    """Whether the op is a QTensor method (clone, contiguous, reshape, ...), whose first
    argument can only be a QTensor."""
    if spec.family == "qtensor":
        return not spec.name.startswith("make_")
    return getattr(spec.op, "__module__", "").startswith("qops._registry")


def mutations(spec):
    """Every mutated case of `spec`: (label, argument name, Case)."""
    names = list(_params(spec))
    out = []
    for ci, case in enumerate(base_cases(spec)):
        given = set(names[:len(case.args)]) | set(case.kwargs)
        for i, v in enumerate(case.args):
            argname = names[i] if i < len(names) else f"arg{i}"
            muts = _value_mutations(v, method=i == 0 and _is_method(spec))
            if i > 0 and isinstance(v, QTensor) and isinstance(case.args[0], QTensor):
                muts.append((f"the same object as {names[0]}", case.args[0]))   # aliasing
            for label, m in muts:
                # an in-place op gets its own copy of the other arguments
                base = spec.cases()[_index(spec, case)] if spec.name.endswith("_") else case
                args = base.args[:i] + (m,) + base.args[i + 1:]
                out.append((f"c{ci} {argname}={label}", argname, Case(args, dict(case.kwargs))))
        for k, v in case.kwargs.items():
            for label, m in _value_mutations(v):
                out.append((f"c{ci} {k}={label}", k, Case(case.args, {**case.kwargs, k: m})))
        # arguments left at their defaults (first base case only)
        if ci == 0:
            for k, p in _params(spec).items():
                if k in given or p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                    continue
                for label, m in _value_mutations(p.default):
                    out.append((f"c{ci} {k}={label}", k, Case(case.args, {**case.kwargs, k: m})))
    return out


# -- QTensor methods and constructors (not registry ops, the same treatment) ------------------

def _m(name, fn, *argsets):
    """A pseudo-spec of family "qtensor": fn(input, ...) with valid argument tuples."""
    def cases():
        r = u.rng(zlib.crc32(name.encode()))
        q = u.random_qtensor(r, (2, 3, 4), scale=0.1, zero_point=3)
        pc = qops.make_per_channel_quantized_tensor(
            np.ascontiguousarray(q._int), np.array([0.1, 0.2, 0.3]), np.array([1, 2, 3]), 1)
        env = {"q": q, "pc": pc, "q1": u.random_qtensor(r, (1, 3, 4), scale=0.2, zero_point=5),
               "pc1": qops.make_per_channel_quantized_tensor(   # a channel axis of size 1
                   np.ascontiguousarray(q._int[:1]), np.array([0.4]), np.array([7]), 0),
               "raw": np.ascontiguousarray(q._int)}
        return [Case(tuple(env.get(a, a) if isinstance(a, str) else a for a in args))
                for args in argsets]
    fn.__name__ = name
    return OpSpec(name, "qtensor", (), fn, cases, None, {}, None, "a QTensor method")


def _reshape(input, shape):
    return input.reshape(shape)


def _view(input, shape):
    return input.view(shape)


def _resize_(input, shape):
    return input.resize_(shape)


def _copy_(input, src):
    return input.copy_(src)


def _transpose(input, dim0, dim1):
    return input.transpose(dim0, dim1)


def _permute(input, dims):
    return input.permute(dims)


def _expand(input, sizes):
    return input.expand(sizes)


def _squeeze(input, dim):
    return input.squeeze(dim)


def _unsqueeze(input, dim):
    return input.unsqueeze(dim)


def _select(input, dim, index):
    return input.select(dim, index)


def _getitem(input, key):
    return input[key]


def _flatten(input, start_dim, end_dim):
    return input.flatten(start_dim, end_dim)


def _size(input, dim):
    return input.size(dim)


def _equal(input, other):
    return input.equal(other)


def _make_pt(input, scale, zero_point):
    return qops.make_per_tensor_quantized_tensor(input, scale, zero_point)


def _make_pc(input, scales, zero_points, axis):
    return qops.make_per_channel_quantized_tensor(input, scales, zero_points, axis)


METHOD_SPECS = [
    _m("reshape", _reshape, ("q", (4, 6)), ("pc", (2, 3, 4, 1))),
    _m("view", _view, ("q", (6, 4)), ("pc", (2, 3, 2, 2))),
    _m("resize_", _resize_, ("q", (5, 5)), ("q", (2, 7))),
    _m("copy_", _copy_, ("q", "q1"), ("q", "pc"), ("q", "pc1")),
    _m("transpose", _transpose, ("q", 0, 2), ("pc", 1, 2)),
    _m("permute", _permute, ("q", (2, 0, 1)), ("pc", (1, 2, 0))),
    _m("expand", _expand, ("q1", (3, 3, 4)), ("q1", (2, 2, 3, 4))),
    _m("squeeze", _squeeze, ("q1", 0), ("q1", None)),
    _m("unsqueeze", _unsqueeze, ("q", 1), ("pc", -1)),
    _m("select", _select, ("q", 1, 2), ("pc", 2, 0)),
    _m("getitem", _getitem, ("q", (slice(None), 1)), ("pc", (0, slice(None, None, -1)))),
    _m("flatten", _flatten, ("q", 0, -1), ("pc", 2, 2)),
    _m("size", _size, ("q", 1), ("pc", -1)),
    _m("equal", _equal, ("q", "q1"), ("pc", "pc")),
    _m("make_per_tensor_quantized_tensor", _make_pt, ("raw", 0.1, 3),
       (np.zeros((3, 0), np.int8), 1e-3, -128)),
    _m("make_per_channel_quantized_tensor", _make_pc,
       ("raw", np.array([0.1, 0.2, 0.3]), np.array([1, 2, 3]), 1),
       ("raw", np.array([0.5, 0.25]), np.array([0, 255]), 0)),
]


def _all_specs():
    return list(all_specs()) + METHOD_SPECS


def family_cases(family):
    """(op name, label, argument name, spec, Case) of every mutated case of a family, in a
    fixed order (the same in every child process)."""
    out = []
    for spec in _all_specs():
        if spec.family != family:
            continue
        for label, argname, case in mutations(spec):
            out.append((spec.name, label, argname, spec, case))
    return out


# -- running ------------------------------------------------------------------------------

class _Raised:
    def __init__(self, exc):
        self.type = type(exc)
        self.msg = str(exc)

    def __repr__(self):
        return f"{self.type.__name__}: {self.msg[:300]}"


_BIG = 1 << 26


def _canon(out):
    """u.canon, except that a huge (0-stride) view is summarized, not copied."""
    if isinstance(out, (tuple, list)):
        return tuple(_canon(o) for o in out)
    if isinstance(out, QTensor) and out._int.size * out._int.itemsize > _BIG:
        a = out._int
        return ("big", a.shape, a.dtype.str, out._qscheme, out._scale, out._zero_point,
                a.flat[0] if a.size else None, a.flat[-1] if a.size else None)
    if isinstance(out, QTensor):
        # the result must be usable: dequantizing reads its qparams per channel (a tensor
        # with more channels than scales once read out of bounds here)
        return u.canon(out) + (np.asarray(out.dequantize()),)
    return u.canon(out)


def _run(call, backend):
    with qops.backend(backend):
        try:
            return _canon(call())
        except BaseException as e:        # noqa: B902 - every exception is a verdict here
            if isinstance(e, KeyboardInterrupt):
                raise
            return _Raised(e)


def _snapshot(v):
    if isinstance(v, QTensor):
        return ("q", np.array(v._int, copy=True), v._scale, v._zero_point)
    if isinstance(v, np.ndarray):
        return ("a", np.array(v, copy=True))
    if isinstance(v, (list, tuple)):
        return ("l", [_snapshot(x) for x in v])
    return None


def _same_snapshot(a, b):
    if a is None or b is None:
        return a is b
    if a[0] == "l":
        return len(a[1]) == len(b[1]) and all(_same_snapshot(x, y) for x, y in zip(a[1], b[1]))
    if a[0] == "a" or a[0] == "q":
        x, y = a[1], b[1]
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.dtype.kind in "fc":
            eq = (x == y) | (np.isnan(x) & np.isnan(y))
        elif x.dtype == object:
            return True
        else:
            eq = x == y
        return bool(np.all(eq)) and a[2:] == b[2:]
    return True


def _save(v):
    """The state of every QTensor in v (slots, and a copy of its values) for _restore."""
    if isinstance(v, QTensor):
        state = {k: getattr(v, k) for k in QTensor.__slots__ if hasattr(v, k)
                 and not k.startswith("__")}
        return [(v, state, np.array(v._int, copy=True))]
    if isinstance(v, (list, tuple)):
        return [s for x in v for s in _save(x)]
    return []


def _restore(saved):
    """Undo an in-place op, so that each backend (and each later case) sees the same input."""
    for q, state, values in saved:
        for k, x in state.items():
            setattr(q, k, x)
        if q._int.flags.writeable and q._int.shape == values.shape:
            np.copyto(q._int, values)


def _calls(spec, case):
    """(path name, zero-argument callable maker) for the direct call and the spec's runner."""
    paths = [("direct", lambda: (lambda: case.call(spec.op)))]
    # (an in-place op's runner only clones its input first: the direct call is the op)
    if spec.runner is not None and not spec.name.endswith("_"):
        paths.append(("runner", lambda: spec.qops_call(case)))
    return paths


#: indexing methods raise IndexError for an index out of range, as Python and PyTorch do
_INDEXING = ("select", "getitem")


def _own_memory_error(r, spec, argname):
    """A MemoryError of qops' own that names what could not be allocated (this child's address
    space is capped) passes; numpy's bare "Unable to allocate" does not."""
    return issubclass(r.type, MemoryError) and (_names(r.msg, spec.name)
                                                or _names(r.msg, argname))


def _truthy(v):
    try:
        return bool(v)
    except Exception:
        return False


def _names(msg, argname):
    return re.search(rf"(?<![\w.]){re.escape(argname)}(?!\w)", msg) is not None


#: other words that name an argument ("per-channel tensors take only basic indexing")
_ALIASES = {"key": ("index", "indexing")}


def _names_arg(msg, argname, spec, value):
    """Whether an error message names the mutated argument. A tensor or array can be wrong
    only relative to another argument (an output zero point outside its new dtype's range):
    naming any of the op's arguments will do for those."""
    if any(_names(msg, n) for n in (argname,) + _ALIASES.get(argname, ())):
        return True
    # a function of one argument, or a QTensor method, may name itself ("copy_() takes ...")
    if (len(_params(spec)) == 1 or spec.family == "qtensor") and _names(msg, spec.name):
        return True
    if isinstance(value, (QTensor, np.ndarray, list, qops._dtypes.QDtype)):
        return any(_names(msg, p) for p in _params(spec))
    return False


def _outcome(r):
    return f"raised {r!r}" if isinstance(r, _Raised) else "returned"


def _mutated(spec, case, argname):
    if argname in case.kwargs:
        return case.kwargs[argname]
    names = list(_params(spec))
    i = names.index(argname) if argname in names else -1
    return case.args[i] if 0 <= i < len(case.args) else None


_UNRAISABLE = []


def _unraisable(info):
    # An exception inside a noexcept kernel (the bounds-checked build's IndexError) cannot
    # propagate: Cython reports it here and the kernel goes on.
    _UNRAISABLE.append(f"{info.exc_type.__name__}: {info.exc_value} (in {info.object!r})")


def check(spec, label, argname, case):
    """None if the mutated call behaved, else why not (one line)."""
    problems = []
    del _UNRAISABLE[:]
    inplace = spec.name.endswith("_") or bool(case.kwargs.get("inplace") is not None
                                               and _truthy(case.kwargs.get("inplace")))
    for path, make in _calls(spec, case):
        res = {}
        for backend in ("ref", "fast"):
            if not inplace and not (isinstance(case.args[0], list) and "generator" in label):
                before = _snapshot(tuple(case.args) + tuple(case.kwargs.values()))
            else:
                before = None

            def call():
                return make()()
            saved = _save(tuple(case.args) + tuple(case.kwargs.values())) if inplace else None
            res[backend] = _run(call, backend)
            if saved:
                _restore(saved)
            if before is not None:
                after = _snapshot(tuple(case.args) + tuple(case.kwargs.values()))
                if not _same_snapshot(before, after):
                    problems.append(f"{path} {backend}: an input was modified")
        ref, fast = res["ref"], res["fast"]
        accepted = (ValueError, TypeError) + ((IndexError,) if spec.name in _INDEXING else ())
        for backend, r in res.items():
            if isinstance(r, _Raised) and not issubclass(r.type, accepted) \
                    and not _own_memory_error(r, spec, argname):
                problems.append(f"{path} {backend} raised {r!r}")
        if isinstance(ref, _Raised) != isinstance(fast, _Raised):
            problems.append(f"{path}: ref {_outcome(ref)} but fast {_outcome(fast)}")
        elif isinstance(ref, _Raised):
            if ref.type is not fast.type:
                problems.append(f"{path}: ref raised {ref!r}, fast {fast!r}")
            elif (issubclass(ref.type, (ValueError, TypeError))
                  and not _names_arg(ref.msg, argname, spec, _mutated(spec, case, argname))):
                problems.append(f"{path}: {ref!r} does not name {argname!r}")
        else:
            try:
                u.assert_same(fast, ref, "fast vs ref")
            except AssertionError as e:
                problems.append(f"{path}: {str(e)[:300]}")
            except Exception as e:       # results that cannot even be compared
                problems.append(f"{path}: results not comparable ({type(e).__name__}: {e})")
        if _UNRAISABLE:
            problems.append(f"{path}: an exception inside a kernel was swallowed: "
                            f"{_UNRAISABLE[0][:300]}")
        if problems:
            break
    return "; ".join(problems) if problems else None


def _limit_memory(extra=3 << 30):
    """Cap the address space at what is mapped now plus `extra`: a huge allocation is then a
    MemoryError (a failure) rather than the machine's OOM killer."""
    try:
        import resource
        with open("/proc/self/status") as f:
            vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = vm + extra
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, ValueError, StopIteration):
        pass


def main(family, start=0, threads=2):
    # u.canon tries "import torch" (seconds): the oracle plays no part here
    sys.modules.setdefault("torch", None)
    faulthandler.enable()           # a crash leaves its Python stack in the parent's report
    sys.unraisablehook = _unraisable
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    qops.set_num_threads(threads)
    cases = family_cases(family)
    _limit_memory()
    w = sys.stdout
    # the suite's own test: a crash at this case (the parent must name it and go on)
    crash_at = int(os.environ.get("QOPS_HOSTILE_CRASH_AT", "-1"))
    for i in range(start, len(cases)):
        name, label, argname, spec, case = cases[i]
        w.write(f"S {i}\t{name}\t{label}\n")
        w.flush()
        if i == crash_at:
            os.kill(os.getpid(), signal.SIGSEGV)
        why = check(spec, label, argname, case)
        if why is not None:
            why = why.replace("\n", " ").replace("\t", " ")
            w.write(f"F {i}\t{name}\t{label}\t{why}\n")
            w.flush()
    w.write(f"D {len(cases)}\n")
    w.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
