"""Per-layer error report: where does the quantized model lose accuracy?

`compare_layers(float_model, quantized_model, inputs)` runs both models on the same inputs,
records each layer's output with forward hooks (layers matched by name), and measures for each
layer of the quantized model
* SQNR in dB: 10 log10(sum f^2 / sum (f - q)^2) (higher is better; 8-bit is ~40 dB at best),
* the largest absolute error |f - q|,
* the saturated fraction: float outputs outside the quantized range [s(qmin-zp), s(qmax-zp)]
  by more than half a step (clipped by the output qparams).
Errors are end to end (each layer sees the quantized model's own inputs), so a drop in SQNR
from one row to the next shows the layer that hurts.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from qops._qtensor import QTensor

if TYPE_CHECKING:
    from qops.nn.module import Module

__all__ = ["LayerReport", "compare_layers", "format_report", "plot_report"]


class LayerReport:
    """One row of the report: a layer's name, type and error measures."""

    __slots__ = ("name", "kind", "sqnr_db", "max_abs_error", "saturated_fraction", "scale",
                 "zero_point", "numel")

    def __init__(self, name: str, kind: str, sqnr_db: Optional[float],
                 max_abs_error: Optional[float], saturated_fraction: float, scale: Optional[float],
                 zero_point: Optional[int], numel: int) -> None:
        self.name = name
        self.kind = kind
        self.sqnr_db = sqnr_db
        self.max_abs_error = max_abs_error
        self.saturated_fraction = saturated_fraction
        self.scale = scale
        self.zero_point = zero_point
        self.numel = numel

    def as_dict(self) -> Any:
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self) -> str:
        return (f"LayerReport({self.name!r}, {self.kind}, sqnr={self.sqnr_db:.2f} dB, "
                f"max_abs_error={self.max_abs_error:.4g}, "
                f"saturated={self.saturated_fraction:.4f})")


def _record(model, names):
    store = {n: [] for n in names}
    handles = []
    mods = dict(model.named_modules())
    for n in names:
        def hook(mod, args, out, _n=n):
            store[_n].append(out)
        handles.append(mods[n].register_forward_hook(hook))
    return store, handles


def _as_float(out):
    if isinstance(out, QTensor):
        return out.dequantize()
    return np.asarray(out, dtype=np.float32)


def sqnr(reference: Any, test: Any) -> Any:
    """Signal-to-quantization-noise ratio in dB (inf when equal)."""
    ref = np.asarray(reference, dtype=np.float64)
    noise = ref - np.asarray(test, dtype=np.float64)
    p_noise = float(np.sum(noise * noise))
    p_sig = float(np.sum(ref * ref))
    if p_noise == 0.0:
        return math.inf
    if p_sig == 0.0:
        return -math.inf
    return 10.0 * math.log10(p_sig / p_noise)


def compare_layers(float_model: Module, quantized_model: Module, inputs: Any) -> Any:
    """Run both models on `inputs` and measure each quantized layer's error against the float one.

    Parameters
    ----------
    float_model : the float model (fused or not) whose layer names the quantized model shares
    quantized_model : the converted model
    inputs : one float array (a batch) or an iterable of batches

    Returns
    -------
    list of LayerReport, in the quantized model's layer order
    """
    from qops.nn.module import Identity
    fmods = dict(float_model.named_modules())
    # Leaves only; the Identity placeholders fusion leaves behind repeat their neighbour's row.
    names = [n for n, m in quantized_model.named_modules()
             if n and n in fmods and not any(c is not None for c in m._modules.values())
             and type(m) is not Identity]
    if not names:
        raise ValueError("compare_layers: the two models share no layer names; pass the float "
                         "model the quantized one was converted from")
    batches = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
    f_store, f_handles = _record(float_model, names)
    q_store, q_handles = _record(quantized_model, names)
    try:
        for b in batches:
            float_model(b)
            quantized_model(b)
    finally:
        for h in f_handles + q_handles:
            h.remove()
    qmods = dict(quantized_model.named_modules())
    rows = []
    for n in names:
        fo, qo = f_store[n], q_store[n]
        if not fo or not qo or len(fo) != len(qo):
            continue
        f = np.concatenate([_as_float(o).reshape(-1) for o in fo])
        q = np.concatenate([_as_float(o).reshape(-1) for o in qo])
        if f.shape != q.shape:
            continue
        sat, scale, zp = float("nan"), None, None
        last = qo[-1]
        if isinstance(last, QTensor) and not last.is_per_channel:
            scale, zp = float(last.q_scale()), int(last.q_zero_point())
            lo = scale * (last.dtype.qmin - zp)
            hi = scale * (last.dtype.qmax - zp)
            half = scale / 2
            sat = float(np.mean((f < lo - half) | (f > hi + half))) if f.size else 0.0
        err = np.abs(f.astype(np.float64) - q)
        rows.append(LayerReport(n, type(qmods[n]).__name__, sqnr(f, q),
                                float(err.max()) if err.size else 0.0, sat, scale, zp, int(f.size)))
    return rows


def format_report(rows: Any) -> Any:
    """The report as a text table, with the worst layer (lowest SQNR) marked."""
    if not rows:
        return "(no layers compared)"
    # The layer that hurts most is the one whose SQNR falls most below the previous row's.
    drops = [(rows[i - 1].sqnr_db - rows[i].sqnr_db, i) for i in range(1, len(rows))
             if math.isfinite(rows[i].sqnr_db) and math.isfinite(rows[i - 1].sqnr_db)]
    worst = max(drops)[1] if drops and max(drops)[0] > 0 else None
    name_w = max(5, max(len(r.name) for r in rows))
    kind_w = max(4, max(len(r.kind) for r in rows))
    head = (f"{'layer':<{name_w}}  {'type':<{kind_w}}  {'SQNR dB':>8}  {'max |err|':>10}  "
            f"{'saturated':>9}  {'scale':>10}  {'zp':>4}")
    lines = ["per-layer error of the int8 model against the float model "
             "(same inputs, errors accumulate)", head, "-" * len(head)]
    for i, r in enumerate(rows):
        s = "inf" if r.sqnr_db == math.inf else f"{r.sqnr_db:8.2f}"
        sat = "-" if math.isnan(r.saturated_fraction) else f"{r.saturated_fraction:9.2%}"
        scale = "-" if r.scale is None else f"{r.scale:10.4g}"
        zp = "-" if r.zero_point is None else f"{r.zero_point:4d}"
        mark = "  <- largest SQNR drop" if i == worst else ""
        lines.append(f"{r.name:<{name_w}}  {r.kind:<{kind_w}}  {s:>8}  {r.max_abs_error:10.4g}  "
                     f"{sat:>9}  {scale:>10}  {zp:>4}{mark}")
    return "\n".join(lines)


def plot_report(rows: Any, path: Any) -> Any:
    """Save a bar chart of per-layer SQNR to `path`; return the path, or None without matplotlib.

    Parameters
    ----------
    rows : list of LayerReport
    path : str, the image file to write (PNG)
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = [r.name for r in rows]
    vals = [r.sqnr_db if math.isfinite(r.sqnr_db) else 0.0 for r in rows]
    fig, ax = plt.subplots(figsize=(max(4, 0.6 * len(rows) + 2), 3.5))
    ax.bar(range(len(rows)), vals, color="#4477aa")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(names, rotation=45, ha="right")
    ax.set_ylabel("SQNR (dB)")
    ax.set_title("per-layer SQNR, int8 vs float")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
