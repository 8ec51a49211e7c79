"""qops.load on hostile files: truncated, corrupted, edited, oversized and deeply nested.

A few real models are saved, then each file is mangled in many seeded ways. Every case must
raise qops.LoadError (naming the file, never suggesting pickle) within a bounded time and
bounded memory; a corruption that misses every checked byte (a zip timestamp, say) may load,
but then as the very model that was saved.
"""
import io
import json
import time
import tracemalloc
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import qops
import qops.nn as nn
import qops.nn.quantized as nnq
from qops.nn.intrinsic.quantized import dynamic as nniqd
from qops.nn.quantized import dynamic as nnqd

F32 = np.float32
SEED = 19
MAX_SECONDS = 2.0           # per case
MAX_BYTES = 200 << 20       # peak traced allocation per case


def _models():
    """name -> a small model of each family qops.save handles."""
    from qops.quantization import _demo
    rng = np.random.default_rng(SEED)
    fused, qcnn = _demo.quantize_demo_model(_demo.build_model(),
                                            rng.random((4, 1, 8, 8)).astype(F32),
                                            stream=io.StringIO())
    dyn = nn.Sequential(OrderedDict([("fc", nnqd.Linear(12, 8)), ("fcr", nniqd.LinearReLU(8, 6)),
                                     ("half", nnqd.Linear(6, 4, dtype="float16"))]))
    misc = nn.Sequential(OrderedDict([
        ("quant", nnq.Quantize(0.05, 7, qops.quint8)),
        ("bn", nnq.BatchNorm2d(3)), ("hs", nnq.Hardswish(0.1, 3)),
        ("ln", nnq.LayerNorm((3, 4, 4), scale=0.2, zero_point=5)),
        ("gn", nnq.GroupNorm(1, 3, scale=0.2, zero_point=5)),
        ("inorm", nnq.InstanceNorm2d(3, scale=0.3, zero_point=1)),
        ("add", nnq.QFunctional()), ("conv", nnq.Conv1d(3, 6, 2, groups=3)),
        ("deq", nnq.DeQuantize())]))
    # the fused float model without its stubs (qops.save keeps qops.nn types only)
    fused = nn.Sequential(OrderedDict((k, m) for k, m in fused.named_children()
                                      if k not in ("quant", "dequant")))
    return {"qcnn": qcnn, "fused": fused.eval(), "dynamic": dyn.eval(), "misc": misc.eval()}


def _saved_bytes(model):
    """qops.save's file for `model`, as bytes."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/m.npz"
        qops.save(model, path)
        with open(path, "rb") as f:
            return f.read()


def _read(blob):
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        arrays = {n[:-4]: np.lib.format.read_array(zf.open(n), allow_pickle=True)
                  for n in zf.namelist()}
    meta = json.loads(str(arrays.pop("__qops__")))
    return meta, arrays


def _write(meta, arrays, compress=True):
    out = dict(arrays)
    out["__qops__"] = np.array(json.dumps(meta))
    buf = io.BytesIO()
    (np.savez_compressed if compress else np.savez)(buf, **out)
    return buf.getvalue()


def _nodes(node, path=""):
    """(path, node) of every module node of a description, depth first."""
    yield path, node
    for name, child in node["children"].items():
        if child is not None:
            yield from _nodes(child, f"{path}.{name}" if path else name)


# -- the mutations --------------------------------------------------------------------------
_SIZE_KEYS = ("in_features", "out_features", "in_channels", "out_channels", "kernel_size",
              "num_features", "num_channels", "normalized_shape")


def _bad_size_values(v):
    """Values of a size argument that cannot describe the stored arrays."""
    if isinstance(v, dict) and "tuple" in v:
        t = v["tuple"]
        return [{"tuple": [x + 1 for x in t]}, {"tuple": [-x for x in t]}, {"tuple": "x"},
                {"tuple": [40000] * len(t)}, {"tuple": [2 ** 62] * len(t)}, {"tuple": []}]
    return [v + 1, -1, -(2 ** 31), 40000, 2 ** 40, 2 ** 63, 10 ** 30, "x", None, [[]],
            {"dict": {}}, {"qdtype": "qint8"}]


def _edits(meta, arrays, rng):
    """(label, meta, arrays) edits that make a saved model invalid."""
    out = []
    nodes = list(_nodes(meta["model"]))

    def edited(label, fn, arrays_fn=None):
        m = json.loads(json.dumps(meta))
        a = dict(arrays)
        node_of = dict(_nodes(m["model"]))
        fn(m, node_of)
        if arrays_fn is not None:
            arrays_fn(m, node_of, a)
        out.append((label, m, a))

    for path, node in nodes:
        for key, v in node["config"].items():
            # (a pool's kernel_size sizes no state: any positive value is valid)
            if key in _SIZE_KEYS and (key != "kernel_size" or "in_channels" in node["config"]):
                for i, bad in enumerate(_bad_size_values(v)):
                    def fn(m, nd, path=path, key=key, bad=bad):
                        nd[path]["config"][key] = bad
                    edited(f"config {path}.{key} #{i}", fn)
        for key, enc in node["state"].items():
            if enc is None:
                continue
            (kind, v), = enc.items()
            if kind == "qtensor":
                qt_bad = [("scale", float("nan")), ("scale", 0.0), ("scale", -1.0),
                          ("scale", float("inf")), ("scale", 1e300), ("scale", "0.1"),
                          ("zero_point", 1000), ("zero_point", -1000), ("zero_point", 2.5),
                          ("zero_point", True), ("dtype", "quint8"), ("dtype", "float32"),
                          ("qscheme", "per_tensor_affine" if "axis" in v
                           else "per_channel_affine"),
                          ("qscheme", "bogus"), ("axis", 7), ("axis", -9), ("int", "missing"),
                          ("int", 3)]
                for i, (field, bad) in enumerate(qt_bad):
                    if field in ("scale", "zero_point") and "axis" in v:
                        field += "s"                 # per-channel: a bad array reference
                    if field == "axis" and "axis" not in v:
                        continue

                    def fn(m, nd, path=path, key=key, field=field, bad=bad):
                        nd[path]["state"][key]["qtensor"][field] = bad
                    edited(f"qtensor {path}.{key}.{field} #{i}", fn)
                if "axis" in v:
                    for i, bad in enumerate((np.nan, 0.0, -1.0, np.inf, 1e300)):
                        def afn(m, nd, a, path=path, key=key, bad=bad):
                            ref = nd[path]["state"][key]["qtensor"]["scales"]
                            s = a[ref].copy()
                            s[rng.integers(s.size)] = bad
                            a[ref] = s
                        edited(f"qtensor {path}.{key}.scales value #{i}", lambda m, nd: None,
                               afn)
                    for i, bad in enumerate((1000, -1000)):
                        def afn(m, nd, a, path=path, key=key, bad=bad):
                            ref = nd[path]["state"][key]["qtensor"]["zero_points"]
                            z = a[ref].copy()
                            z[0] = bad
                            a[ref] = z
                        edited(f"qtensor {path}.{key}.zero_points value #{i}",
                               lambda m, nd: None, afn)

                def afn(m, nd, a, path=path, key=key):
                    ref = nd[path]["state"][key]["qtensor"]["int"]
                    a[ref] = a[ref].astype(np.float32)
                edited(f"qtensor {path}.{key} float data", lambda m, nd: None, afn)

                def afn2(m, nd, a, path=path, key=key):
                    ref = nd[path]["state"][key]["qtensor"]["int"]
                    a[ref] = a[ref].reshape(-1)[:-1] if a[ref].size > 1 else a[ref][None, None]
                edited(f"qtensor {path}.{key} reshaped", lambda m, nd: None, afn2)
            elif kind == "array":
                arr = arrays[v]
                if key in ("scale", "zero_point"):
                    bads = ([np.array(np.nan), np.array(0.0), np.array(-1.0), np.array(1e300),
                             np.array([0.1, 0.2])] if key == "scale" else
                            [np.array(1000), np.array(-1000), np.array(2.5), np.array([1, 2])])
                elif arr.ndim == 0:
                    bads = [np.zeros(3, arr.dtype), np.array("x")]
                else:
                    bads = [arr.reshape(-1)[:-1] if arr.size > 1 else np.zeros(2, arr.dtype),
                            arr[..., None], np.zeros((0,) + arr.shape, arr.dtype),
                            np.array("x"), np.empty(2, object)]
                for i, bad in enumerate(bads):
                    def afn(m, nd, a, ref=v, bad=bad):
                        a[ref] = bad
                    edited(f"array {path}.{key} #{i}", lambda m, nd: None, afn)
            # the same entry referenced as something else, or not at all
            for i, bad in enumerate(({"array": "nope"}, {"qtensor": {}}, {"float": "x"},
                                     {"int": 1.5}, {"mystery": 1}, [1], "a0")):
                def fn(m, nd, path=path, key=key, bad=bad):
                    nd[path]["state"][key] = bad
                edited(f"state {path}.{key} kind #{i}", fn)
        # arrays swapped between two entries of different shapes
        keys = [k for k, e in node["state"].items() if e and "array" in e]
        for k1, k2 in zip(keys, keys[1:]):
            if arrays[node["state"][k1]["array"]].shape != arrays[node["state"][k2]["array"]].shape:
                def fn(m, nd, path=path, k1=k1, k2=k2):
                    s = nd[path]["state"]
                    s[k1], s[k2] = s[k2], s[k1]
                edited(f"swap {path}.{k1}/{k2}", fn)
    # whole-node edits on a sample of nodes
    for path, node in [nodes[i] for i in sorted(rng.choice(len(nodes), min(6, len(nodes)),
                                                           replace=False))]:
        for i, (field, bad) in enumerate((("type", "os.system"), ("type", 7),
                                          ("config", []), ("state", None), ("children", []),
                                          ("training", "yes"), ("extra", None))):
            if field == "extra":
                def fn(m, nd, path=path):
                    nd[path]["state"]["ghost"] = {"int": 1}
            else:
                def fn(m, nd, path=path, field=field, bad=bad):
                    nd[path][field] = bad
            edited(f"node {path or '<root>'}.{field} #{i}", fn)
    for i, (field, bad) in enumerate((("format", "other"), ("version", 2), ("version", "1"),
                                      ("version", True), ("model", None), ("model", []))):
        def fn(m, nd, field=field, bad=bad):
            m[field] = bad
        edited(f"meta {field} #{i}", fn)
    return out


def _nested(depth, where):
    """A description (JSON text) nested `depth` levels in module children, config or state."""
    if where == "children":
        head = '{"type": "qops.nn.Sequential", "config": {}, "state": {}, "children": {"0": '
        inner = '{"type": "qops.nn.Identity", "config": {}, "state": {}, "children": {}}'
        model = head * depth + inner + "}}" * depth
    elif where == "config":
        v = '{"tuple": [' * depth + "1" + "]}" * depth
        model = ('{"type": "qops.nn.Flatten", "config": {"start_dim": ' + v
                 + '}, "state": {}, "children": {}}')
    else:
        v = '{"qtensor": ' * depth + "1" + "}" * depth
        model = ('{"type": "qops.nn.Identity", "config": {}, "state": {"x": ' + v
                 + '}, "children": {}}')
    return '{"format": "qops.nn.model", "version": 1, "model": ' + model + "}"


def _write_text(meta_text):
    buf = io.BytesIO()
    np.savez_compressed(buf, __qops__=np.array(meta_text))
    return buf.getvalue()


def _oversized():
    """Descriptions whose arguments ask for gigabytes while the file stores a few numbers."""
    cases = []
    small = {"qops.nn.quantized.Linear": nnq.Linear(4, 4),
             "qops.nn.quantized.dynamic.Linear": nnqd.Linear(4, 4),
             "qops.nn.Linear": nn.Linear(4, 4), "qops.nn.quantized.Conv2d": nnq.Conv2d(4, 4, 1),
             "qops.nn.Conv2d": nn.Conv2d(4, 4, 1), "qops.nn.BatchNorm2d": nn.BatchNorm2d(4),
             "qops.nn.quantized.LayerNorm": nnq.LayerNorm(4),
             "qops.nn.LayerNorm": nn.LayerNorm(4), "qops.nn.GroupNorm": nn.GroupNorm(1, 4),
             "qops.nn.quantized.InstanceNorm2d": nnq.InstanceNorm2d(4),
             "qops.nn.quantized.BatchNorm2d": nnq.BatchNorm2d(4)}
    big = {"in_features": 40000, "out_features": 40000, "in_channels": 4096,
           "out_channels": 4096, "num_features": 10 ** 9, "num_channels": 10 ** 9}
    for name, m in small.items():
        meta, arrays = _read(_saved_bytes(m))
        cfg = meta["model"]["config"]
        for variant in range(3):
            c = dict(cfg)
            for k in c:
                if k in big:
                    c[k] = big[k] * (variant + 1) if variant < 2 else big[k] + 1
            if "kernel_size" in c:
                c["kernel_size"] = {"tuple": [31, 31]} if variant else {"tuple": [1, 1]}
            if "normalized_shape" in c:
                c["normalized_shape"] = {"tuple": [40000, 40000 + variant]}
            if "num_channels" in c:
                c["num_groups"] = 1
            m2 = json.loads(json.dumps(meta))
            m2["model"]["config"] = c
            cases.append((f"{name} #{variant}", _write(m2, arrays)))
    # an entry whose .npy header claims a huge array the data does not hold
    meta, arrays = _read(_saved_bytes(nnq.Linear(4, 4)))
    key = meta["model"]["state"]["bias"]["array"]
    for i, shape in enumerate(((50000, 50000), (2 ** 40,), (2 ** 31, 2 ** 31, 4))):
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                      "shape": shape})
        blob = io.BytesIO()
        with zipfile.ZipFile(blob, "w") as zf:
            for k, a in arrays.items():
                with zf.open(k + ".npy", "w") as f:
                    if k == key:
                        f.write(header.getvalue() + b"\0" * 64)
                    else:
                        np.lib.format.write_array(f, a)
            with zf.open("__qops__.npy", "w") as f:
                np.lib.format.write_array(f, np.array(json.dumps(meta)))
        cases.append((f"npy header {shape}", blob.getvalue()))
    # the zip directory claims an entry far larger than its compressed bytes allow
    raw = bytearray(_write(meta, arrays))
    fname = (key + ".npy").encode()
    huge = (2 ** 32 - 2).to_bytes(4, "little")
    pos = raw.find(b"PK\x01\x02")
    while pos >= 0:
        nlen = int.from_bytes(raw[pos + 28:pos + 30], "little")
        if raw[pos + 46:pos + 46 + nlen] == fname:
            raw[pos + 24:pos + 28] = huge                  # uncompressed size, directory
            local = int.from_bytes(raw[pos + 42:pos + 46], "little")
            raw[local + 22:local + 26] = huge              # and local header
        pos = raw.find(b"PK\x01\x02", pos + 4)
    cases.append(("zip entry size claim", bytes(raw)))
    return cases


def _junk(rng):
    cases = [("empty", b""), ("zip header only", b"PK\x03\x04"),
             ("empty zip", _empty_zip()), ("npy not npz", _npy_bytes())]
    for i in range(6):
        cases.append((f"random bytes #{i}", rng.bytes(int(rng.integers(1, 6000)))))
    # a pickle stream with the .npz name, and a .npz whose description is not text
    cases.append(("pickle", b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00K\x01."))
    for i, meta in enumerate((np.arange(5), np.array(["a", "b"]), np.array(b"{}"),
                              np.empty((), object), np.array("[1, 2]"), np.array("null"),
                              np.array('{"format": "qops.nn.model"}'), np.array("1" * 5000))):
        buf = io.BytesIO()
        np.savez(buf, __qops__=meta)
        cases.append((f"description #{i}", buf.getvalue()))
    return cases


def _empty_zip():
    buf = io.BytesIO()
    zipfile.ZipFile(buf, "w").close()
    return buf.getvalue()


def _npy_bytes():
    buf = io.BytesIO()
    np.save(buf, np.arange(10))
    return buf.getvalue()


@pytest.fixture(scope="module")
def saved():
    out = {}
    for name, m in _models().items():
        out[name] = (m, _saved_bytes(m))
    return out


def _check_case(tmp_path, label, blob, model=None):
    """Load `blob` from a file: LoadError (or the saved model itself); time and memory bounded."""
    path = tmp_path / "case.npz"
    path.write_bytes(blob)
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        back = qops.load(path)
        err = None
    except qops.LoadError as e:
        back, err = None, e
    except Exception as e:  # noqa: BLE001 - the point: nothing else may escape
        tracemalloc.stop()
        return f"{label}: raw {type(e).__name__}: {str(e)[:200]}"
    finally:
        elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    problems = []
    if elapsed > MAX_SECONDS:
        problems.append(f"took {elapsed:.2f} s")
    if peak > MAX_BYTES:
        problems.append(f"peak {peak >> 20} MiB")
    if err is not None:
        msg = str(err)
        if "pickle" in msg.lower():
            problems.append(f"suggests pickle: {msg[:200]}")
        if str(path) not in msg:
            problems.append(f"does not name the file: {msg[:200]}")
    elif model is None or not _same(model, back):
        problems.append("loaded without error")
    return f"{label}: {'; '.join(problems)}" if problems else None


def _same(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    if list(sa) != list(sb) or repr(a) != repr(b):
        return False
    for k in sa:
        x, y = sa[k], sb[k]
        if isinstance(x, qops.QTensor):
            if not (isinstance(y, qops.QTensor) and x.equal(y)):
                return False
        elif not np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True):
            return False
    return True


def _run(tmp_path, cases, model=None):
    failures = [f for f in (_check_case(tmp_path, label, blob, model) for label, blob in cases)
                if f]
    assert not failures, f"{len(failures)} of {len(cases)} cases:\n" + "\n".join(failures[:40])
    return len(cases)


@pytest.mark.parametrize("name", ["qcnn", "fused", "dynamic", "misc"])
def test_loader_fuzz_truncated(saved, tmp_path, name):
    model, blob = saved[name]
    rng = np.random.default_rng([SEED, 1, len(blob)])
    cuts = sorted(set([0, 1, 4, 30, len(blob) - 1, len(blob) - 22, len(blob) - 23]
                      + rng.integers(1, len(blob), 25).tolist()))
    _run(tmp_path, [(f"cut at {c}", blob[:c]) for c in cuts])


@pytest.mark.parametrize("name", ["qcnn", "fused", "dynamic", "misc"])
def test_loader_fuzz_corrupted(saved, tmp_path, name):
    model, blob = saved[name]
    rng = np.random.default_rng([SEED, 2, len(blob)])
    cases = []
    for i in range(30):
        b = bytearray(blob)
        for pos in rng.integers(0, len(b), int(rng.integers(1, 9))):
            b[pos] ^= int(rng.integers(1, 256))
        cases.append((f"flip #{i}", bytes(b)))
    _run(tmp_path, cases, model)


@pytest.mark.parametrize("name", ["qcnn", "fused", "dynamic", "misc"])
def test_loader_fuzz_edited(saved, tmp_path, name):
    model, blob = saved[name]
    meta, arrays = _read(blob)
    rng = np.random.default_rng([SEED, 3, len(blob)])
    edits = _edits(meta, arrays, rng)
    # every edit on the small models; a seeded sample on the larger ones (time)
    if len(edits) > 150:
        edits = [edits[i] for i in sorted(rng.choice(len(edits), 150, replace=False))]
    cases = [(label, _write(m, a, compress=bool(i % 2))) for i, (label, m, a) in
             enumerate(edits)]
    assert len(cases) >= 50
    _run(tmp_path, cases)


def test_loader_fuzz_oversized(tmp_path):
    n = _run(tmp_path, _oversized())
    assert n >= 30


def test_loader_fuzz_nested(tmp_path):
    cases = []
    for where in ("children", "config", "state"):
        for depth in (200, 900, 5000):
            cases.append((f"{where} {depth} deep", _write_text(_nested(depth, where))))
    _run(tmp_path, cases)


def test_loader_fuzz_junk(tmp_path):
    _run(tmp_path, _junk(np.random.default_rng([SEED, 4])))


def test_loader_fuzz_round_trip(saved, tmp_path):
    # the unmangled files load as the models saved (the fuzz cases' baseline)
    for name, (model, blob) in saved.items():
        path = tmp_path / f"{name}.npz"
        path.write_bytes(blob)
        assert _same(model, qops.load(path)), name
