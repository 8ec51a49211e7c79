"""PyTorch's vectorized float32 exp, expm1 and tanh: SLEEF's expf, expm1f and tanhf (u10) as
ATen's AVX2 and AVX-512 builds compile them, with fused multiply-adds (docs/semantics.md §21,
§6). Shared by the rnn and activation references; the C twin is qops/_fast/qops_sleef.h.

Each fused multiply-add is one rounding (`fmaf`, the quant family's exact fma); every other
operation is a float32 IEEE operation in SLEEF's order. Double-float ("df") values are pairs
(hi, lo) of float32.
"""
import numpy as np

from qops._ref.quant import fma_f32 as fmaf

__all__ = ["fmaf", "expf", "expm1f", "tanhf"]

F32 = np.float32
F64 = np.float64


# ln 2 split in two for the reductions: L2U has few bits, so q * L2U is exact
R_LN2 = F32(1.442695040888963407359924681001892137426645954152985934135449406931)
L2U = F32(0.693145751953125)
L2L = F32(1.428606765330187045e-06)
# expf's polynomial, highest degree first (Horner)
EXPF_COEF = tuple(F32(v) for v in (
    0.000198527617612853646278381, 0.00139304355252534151077271, 0.00833336077630519866943359,
    0.0416664853692054748535156, 0.166666671633720397949219, 0.5))
# the double-float exp of tanhf: the float part's coefficients, then the df part's
_EXPK2_COEF = tuple(F32(v) for v in (0.1980960224e-3, 0.1394256484e-2, 0.8333456703e-2,
                                     0.4166637361e-1))
_EXPK2_C5 = F32(0.166666659414234244790680580464e+0)
_TANH_ONE = F32(8.664339742)            # tanhf is 1 in float32 beyond


def _pow2i(q):
    # 2^q for int32 -126 <= q <= 127, written into the exponent field
    return ((q + np.int32(127)) << np.int32(23)).astype(np.int32).view(F32)


def _ldexp2(d, q):
    # d 2^q in two steps (2^q itself may not be a normal float)
    half = q >> 1
    return (d * _pow2i(half)) * _pow2i(q - half)


def _rint_q(u, lim):
    # rint(u) as float and int32, |u| clipped to lim first so the cast is defined (callers
    # ignore the result where that matters) and NaN taken as 0
    qf = np.clip(np.nan_to_num(np.rint(u)), -lim, lim).astype(F32)
    return qf, qf.astype(np.int32)


def expf(d):
    """e^d: q = rint(d / ln2), s = d - q ln2 in two fmas, e^s = 1 + s + s^2 P(s) with P in
    fmas, times 2^q in two steps; 0 below -104, inf above 100."""
    d = np.asarray(d, F32)
    with np.errstate(invalid="ignore", over="ignore"):
        qf, q = _rint_q(d * R_LN2, 256)
        s = fmaf(qf, -L2U, d)
        s = fmaf(qf, -L2L, s)
        u = np.full_like(s, EXPF_COEF[0])
        for coef in EXPF_COEF[1:]:
            u = fmaf(u, s, coef)
        u = _ldexp2(F32(1) + fmaf(s * s, u, s), q)
        u = np.where(d < F32(-104), F32(0), u)
        return np.where(F32(100) < d, F32(np.inf), u).astype(F32)


# -- double-float arithmetic, SLEEF's FMA forms ------------------------------------------------

def _add2_f(xh, xl, y):
    # (x + y), x double-float, y float
    s = xh + y
    v = s - xh
    return s, ((xh - (s - v)) + (y - v)) + xl


def _add2_ff(xh, xl, yh, yl):
    s = xh + yh
    v = s - xh
    return s, ((xh - (s - v)) + (yh - v)) + (xl + yl)


def _add_ff(xh, xl, yh, yl):
    # |x| >= |y|
    s = xh + yh
    return s, (((xh - s) + yh) + xl) + yl


def _mul_f(xh, xl, y):
    s = xh * y
    return s, fmaf(xl, y, fmaf(xh, y, -s))


def _mul_ff(xh, xl, yh, yl):
    s = xh * yh
    return s, fmaf(xh, yl, fmaf(xl, yh, fmaf(xh, yh, -s)))


def _squ(xh, xl):
    s = xh * xh
    return s, fmaf(xh + xh, xl, fmaf(xh, xh, -s))


def _rec(dh, dl):
    s = F32(1) / dh
    return s, s * fmaf(-dl, s, fmaf(-dh, s, F32(1)))


def _div(nh, nl, dh, dl):
    t = F32(1) / dh
    s = nh * t
    u = fmaf(t, nh, -s)
    v = fmaf(-dl, t, fmaf(-dh, t, F32(1)))
    return s, fmaf(s, v, fmaf(nl, t, u))


def _expk2(a):
    """e^a as a double-float (SLEEF's expk2f of (a, 0)), for -20 <= a <= 100: callers clamp,
    and select their results where 2^q leaves float32's range."""
    qf, q = _rint_q(a * R_LN2, 256)
    sh, sl = _add2_f(a, F32(0), qf * -L2U)
    sh, sl = _add2_f(sh, sl, qf * -L2L)
    u = np.full_like(sh, _EXPK2_COEF[0])
    for coef in _EXPK2_COEF[1:]:
        u = fmaf(u, sh, coef)
    th, tl = _add2_f(*_mul_f(sh, sl, u), _EXPK2_C5)
    th, tl = _add2_f(*_mul_ff(sh, sl, th, tl), F32(0.5))
    th, tl = _add2_ff(sh, sl, *_mul_ff(*_squ(sh, sl), th, tl))
    s = F32(1) + th
    tl = ((F32(1) - s) + th) + tl
    return _ldexp2(s, q), _ldexp2(tl, q)


def expm1f(a):
    """e^a - 1: the double-float e^a minus 1, rounded to float; inf above 88.7228317,
    -1 below -16.6355323, -0 at -0."""
    a = np.asarray(a, F32)
    with np.errstate(invalid="ignore", over="ignore"):
        dh, dl = _add2_f(*_expk2(np.clip(a, F32(-20), F32(100))), F32(-1))
        x = (dh + dl).astype(F32)
        x = np.where(a > F32(88.72283172607421875), F32(np.inf), x)
        x = np.where(a < F32(-16.635532333438687426013570), F32(-1), x)
        x = np.where((a == 0) & np.signbit(a), F32(-0.0), x)
        return np.where(np.isnan(a), a, x).astype(F32)


def tanhf(x):
    """tanh(x): with d = e^|x| as a double-float, (d - 1/d) / (d + 1/d) in double-float,
    rounded to float; 1 beyond |x| = 8.664339742; x's sign; NaN kept."""
    x = np.asarray(x, F32)
    with np.errstate(invalid="ignore", over="ignore"):
        a = np.minimum(np.abs(x), F32(9))       # (beyond 8.66 the result is 1 anyway)
        dh, dl = _expk2(a)
        eh, el = _rec(dh, dl)
        nh, nl = _add_ff(dh, dl, -eh, -el)
        mh, ml = _add_ff(dh, dl, eh, el)
        yh, yl = _div(nh, nl, mh, ml)
        y = (yh + yl).astype(F32)
        y = np.where(np.abs(x) > _TANH_ONE, F32(1), y)
        y = np.where(np.signbit(x), -y, y).astype(F32)
        return np.where(np.isnan(x), x, y)
