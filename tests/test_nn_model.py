"""A small CNN quantized by torch.ao.quantization, imported with qops.nn.quantized.from_torch;
qops.save / qops.load round trips and their errors."""
import io
import json
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import qops
import qops.nn as nn
import qops.nn.quantized as nnq

F32 = np.float32


class QNet(nn.Module):
    """The qops twin of TNet below: same submodule names, same forward."""

    def __init__(self):
        super().__init__()
        self.quant = nn.Identity()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu1 = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.hs = nn.Hardswish()
        self.skip = nnq.FloatFunctional()
        self.avg = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(8, 10)
        self.dequant = nn.Identity()

    def forward(self, x):
        x = self.quant(x)
        x = self.pool(self.relu1(self.bn1(self.conv1(x))))
        x = self.skip.add(x, self.hs(self.conv2(x)))
        x = self.flatten(self.avg(x))
        return self.dequant(self.fc(x))


nn.register_module_type(QNet, "tests.QNet")


def _torch_net(torch):
    t = torch.nn
    tq = torch.ao.quantization

    class TNet(t.Module):
        def __init__(self):
            super().__init__()
            self.quant = tq.QuantStub()
            self.conv1 = t.Conv2d(1, 8, 3, padding=1)
            self.bn1 = t.BatchNorm2d(8)
            self.relu1 = t.ReLU()
            self.pool = t.MaxPool2d(2)
            self.conv2 = t.Conv2d(8, 8, 3, padding=1)
            self.hs = t.Hardswish()
            self.skip = torch.ao.nn.quantized.FloatFunctional()
            self.avg = t.AdaptiveAvgPool2d(1)
            self.flatten = t.Flatten()
            self.fc = t.Linear(8, 10)
            self.dequant = tq.DeQuantStub()

        def forward(self, x):
            x = self.quant(x)
            x = self.pool(self.relu1(self.bn1(self.conv1(x))))
            x = self.skip.add(x, self.hs(self.conv2(x)))
            x = self.flatten(self.avg(x))
            return self.dequant(self.fc(x))

    return TNet


@pytest.fixture(scope="module")
def quantized_pair():
    from conftest import torch_or_skip
    torch = torch_or_skip()
    torch.backends.quantized.engine = "fbgemm"  # exact conv formula (no oneDNN routing)
    try:
        tq = torch.ao.quantization
        torch.manual_seed(0)
        tnet = _torch_net(torch)().eval()
        with torch.no_grad():
            tnet.bn1.running_mean.uniform_(-0.2, 0.2)
            tnet.bn1.running_var.uniform_(0.5, 1.5)
        float_net = nn.from_torch(tnet, target=QNet())
        tq.fuse_modules(tnet, [["conv1", "bn1", "relu1"]], inplace=True)
        tnet.qconfig = tq.QConfig(activation=tq.MinMaxObserver.with_args(reduce_range=True),
                                  weight=tq.default_per_channel_weight_observer)
        tq.prepare(tnet, inplace=True)
        rng = np.random.default_rng(0)
        calib = rng.standard_normal((16, 1, 8, 8)).astype(F32)
        with torch.no_grad():
            tnet(torch.from_numpy(calib))
        tq.convert(tnet, inplace=True)
        qnet = nnq.from_torch(tnet, target=QNet())
        x = rng.standard_normal((4, 1, 8, 8)).astype(F32)
        with torch.no_grad():
            ref = tnet(torch.from_numpy(x)).numpy()
        yield torch, tnet, qnet, float_net, x, ref
    finally:
        torch.backends.quantized.engine = "fbgemm"


def test_small_cnn_matches_torch(quantized_pair):
    torch, tnet, qnet, float_net, x, ref = quantized_pair
    assert type(qnet.conv1).__name__ == "ConvReLU2d" and isinstance(qnet.bn1, nn.Identity)
    assert isinstance(qnet.quant, nnq.Quantize) and isinstance(qnet.skip, nnq.QFunctional)
    out = qnet.eval()(x)
    # The add and hardswish follow PyTorch's vector-path rounding; PyTorch's scalar tail can
    # round an exact tie the other way (docs/semantics.md §0.2), so one output step is allowed.
    step = float(tnet.fc.scale)
    assert np.abs(out - ref).max() <= step * 1.001
    assert np.mean(out == ref) > 0.9
    # Layer by layer, conv/pool/linear outputs are bit-exact.
    acts = {}
    for name in ("conv1", "pool", "conv2"):
        getattr(qnet, name).register_forward_hook(lambda m, a, o, n=name: acts.__setitem__(n, o))
        getattr(tnet, name).register_forward_hook(
            lambda m, a, o, n=name: acts.__setitem__("t" + n, o))
    qnet(x)
    with torch.no_grad():
        tnet(torch.from_numpy(x))
    for name in ("conv1", "pool", "conv2"):
        np.testing.assert_array_equal(acts[name].int_repr(), acts["t" + name].int_repr().numpy())


def test_float_twin_matches_torch_float(quantized_pair):
    torch, tnet, qnet, float_net, x, ref = quantized_pair
    torch.manual_seed(0)
    tfloat = _torch_net(torch)().eval()
    with torch.no_grad():
        tfloat.bn1.running_mean.uniform_(-0.2, 0.2)
        tfloat.bn1.running_var.uniform_(0.5, 1.5)
        fref = tfloat(torch.from_numpy(x)).numpy()
    out = float_net.eval()(x)
    assert out.shape == ref.shape and out.dtype == F32
    np.testing.assert_allclose(out, fref, rtol=1e-5, atol=1e-6)
    # The int8 model is close to the float one.
    assert np.abs(ref - fref).max() < 0.1 * np.abs(fref).max() + 0.05


def test_save_load_round_trip_bit_identical(quantized_pair, tmp_path):
    _, _, qnet, _, x, _ = quantized_pair
    path = tmp_path / "model.qops"
    qops.save(qnet, path)
    loaded = qops.load(path)
    assert type(loaded) is QNet and not loaded.training
    assert [(n, type(m)) for n, m in loaded.named_modules()] == \
        [(n, type(m)) for n, m in qnet.named_modules()]
    np.testing.assert_array_equal(loaded(x), qnet(x))
    for k, v in qnet.state_dict().items():
        w = loaded.state_dict()[k]
        if isinstance(v, qops.QTensor):
            assert v.equal(w), k
        elif v is not None:
            np.testing.assert_array_equal(np.asarray(w), np.asarray(v))


def test_save_load_every_layer_kind(tmp_path):
    from qops.nn.intrinsic import quantized as nniq
    from qops.nn.quantized import dynamic as nnqd
    rng = np.random.default_rng(1)
    conv = nniq.ConvReLU2d(3, 4, 3, padding=1, padding_mode="reflect")
    w = qops.quantize_per_channel(rng.standard_normal((4, 3, 3, 3)).astype(F32),
                                  np.full(4, 0.02), np.zeros(4, np.int64), 0, qops.qint8)
    conv.set_weight_bias(w, rng.standard_normal(4).astype(F32))
    conv.scale, conv.zero_point = 0.1, 5
    lin = nnqd.Linear(4, 3)
    lin.set_weight_bias(qops.quantize_per_tensor(rng.standard_normal((3, 4)).astype(F32), 0.02, 0,
                                                 qops.qint8), None)
    model = nn.Sequential(
        nnq.Quantize(0.05, 128, qops.quint8), conv, nnq.BatchNorm2d(4), nnq.Hardswish(0.1, 10),
        nn.MaxPool2d(2, ceil_mode=True), nnq.LayerNorm((3, 3), scale=0.1, zero_point=100),
        nnq.DeQuantize(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), lin)
    model.eval()
    path = tmp_path / "m.npz"
    qops.save(model, path)
    loaded = qops.load(path)
    assert repr(loaded) == repr(model)
    x = rng.standard_normal((2, 3, 5, 5)).astype(F32)
    np.testing.assert_array_equal(loaded(x), model(x))
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["__qops__"]))
    assert meta["format"] == "qops.nn.model" and meta["version"] == 1
    half = nnqd.Linear(4, 3, dtype="float16")
    half.set_weight_bias(rng.standard_normal((3, 4)).astype(F32), np.ones(3, F32))
    qf = nnq.QFunctional()
    qf.scale, qf.zero_point = 0.2, 7
    pair = nn.ModuleList([half, qf])
    qops.save(pair, path)
    back = qops.load(path)
    xf = rng.standard_normal((2, 4)).astype(F32)
    np.testing.assert_array_equal(back[0](xf), half(xf))
    assert back[0].dtype == "float16" and (back[1].scale, back[1].zero_point) == (0.2, 7)


def _rewrite(path, out, edit=None, drop=(), add=None):
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files if k not in drop}
    if edit is not None:
        meta = json.loads(str(arrays["__qops__"]))
        edit(meta)
        arrays["__qops__"] = np.array(json.dumps(meta))
    arrays.update(add or {})
    with open(out, "wb") as f:
        np.savez(f, **arrays)
    return out


def test_load_refuses_bad_files(tmp_path):
    model = nn.Sequential(nnq.Quantize(0.1, 3, qops.quint8), nnq.Conv2d(1, 2, 1))
    good = tmp_path / "good.npz"
    qops.save(model, good)

    def set_version(m):
        m["version"] = 2

    def set_type(m):
        m["model"]["children"]["1"]["type"] = "os.system"

    def drop_children(m):
        del m["model"]["children"]

    def bad_config(m):
        m["model"]["children"]["1"]["config"]["in_channels"] = {"tuple": "x"}

    cases = [
        (set_version, {}, "format version 2; this qops reads version 1"),
        (set_type, {}, "unknown module type 'os.system'"),
        (drop_children, {}, "lacks a valid 'children'"),
        (bad_config, {}, "malformed constructor argument"),
    ]
    for i, (edit, kw, msg) in enumerate(cases):
        with pytest.raises(ValueError, match=msg):
            qops.load(_rewrite(good, tmp_path / f"bad{i}.npz", edit, **kw))
    with np.load(good, allow_pickle=False) as z:
        first = next(k for k in z.files if k != "__qops__")
    with pytest.raises(ValueError, match="is missing"):
        qops.load(_rewrite(good, tmp_path / "missing.npz", drop=(first,)))
    obj = np.empty(2, dtype=object)
    with pytest.raises(ValueError, match="cannot be read"):
        qops.load(_rewrite(good, tmp_path / "pickled.npz", drop=(first,),
                           add={first: obj}))
    with pytest.raises(ValueError, match="no '__qops__' entry"):
        qops.load(_rewrite(good, tmp_path / "nometa.npz", drop=("__qops__",)))
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="not a qops model file"):
        qops.load(junk)
    with zipfile.ZipFile(tmp_path / "badjson.npz", "w") as zf:
        with zf.open("__qops__.npy", "w") as f:
            np.lib.format.write_array(f, np.array("{not json"))
    with pytest.raises(ValueError, match="bad description"):
        qops.load(tmp_path / "badjson.npz")


def test_save_refuses_unknown_types(tmp_path):
    class Mine(nn.Module):
        def forward(self, x):
            return x

    with pytest.raises(TypeError, match="not in qops' module table"):
        qops.save(nn.Sequential(Mine()), tmp_path / "x.npz")
    with pytest.raises(TypeError, match="must be a qops.nn.Module"):
        qops.save(object(), tmp_path / "x.npz")


def _example(name, cls):
    """A small instance of module type `name` (every entry of the module table)."""
    from qops.nn import intrinsic as nni
    short = name.rsplit(".", 1)[1]
    if issubclass(cls, nni._FusedModule):
        parts = []
        for part in cls._PARTS:
            pname = part.__name__
            if pname.startswith("Conv"):
                parts.append(part(2, 4, 3))
            elif pname == "Linear":
                parts.append(part(3, 4))
            elif pname.startswith("BatchNorm"):
                parts.append(part(4))
            else:
                parts.append(part())
        return cls(*parts)
    if short.startswith(("Conv", "ConvReLU")) and ".qat." not in name:
        return cls(2, 4, 3)
    if short in ("Linear", "LinearReLU", "NonDynamicallyQuantizableLinear"):
        return cls(3, 2)
    if short.startswith(("BatchNorm", "BNReLU", "InstanceNorm")):
        return cls(4)
    if short.startswith(("MaxPool", "AvgPool")):
        return cls(2)
    if short.startswith("AdaptiveAvgPool"):
        return cls(2)
    if short.startswith("Upsampling"):
        return cls(scale_factor=2)
    table = {
        "LayerNorm": lambda: cls(4), "GroupNorm": lambda: cls(2, 4), "Upsample":
        lambda: cls(scale_factor=2.0, mode="nearest"), "Quantize": lambda: cls(0.1, 3, "quint8"),
        "ELU": lambda: cls(0.1, 3) if ".quantized." in name else cls(0.5),
        "LeakyReLU": lambda: cls(0.1, 3, 0.2) if ".quantized." in name else cls(0.2),
        "Hardswish": lambda: cls(0.1, 3) if ".quantized." in name else cls(),
        "Hardtanh": lambda: cls(-2.0, 2.0), "Dropout": lambda: cls(0.25),
        "Embedding": lambda: cls(10, 4), "EmbeddingBag": lambda: cls(10, 4),
        "LSTM": lambda: cls(3, 4, 2, bidirectional=True), "GRU": lambda: cls(3, 4, 2),
        "RNN": lambda: cls(3, 4, nonlinearity="relu"), "RNNBase": lambda: cls("LSTM", 3, 4),
        "LSTMCell": lambda: cls(3, 4), "GRUCell": lambda: cls(3, 4),
        "RNNCell": lambda: cls(3, 4), "RNNCellBase": lambda: cls(3, 4, True, 4),
        "MultiheadAttention": lambda: cls(8, 2, kdim=6, vdim=4, add_bias_kv=True),
        "TransformerEncoderLayer": lambda: cls(8, 2, 16, activation="gelu", norm_first=True),
        "TransformerEncoder": lambda: cls(nn.TransformerEncoderLayer(8, 2, 16), 2,
                                          nn.LayerNorm(8)),
        "TransformerDecoderLayer": lambda: cls(8, 2, 16),
        "TransformerDecoder": lambda: cls(nn.TransformerDecoderLayer(8, 2, 16), 2),
        "Transformer": lambda: cls(nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16)),
                                   nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16)),
                                   8, 2),
        "Sequential": lambda: cls(nn.ReLU(), nn.Tanh()),
        "ModuleList": lambda: cls([nn.ReLU()]), "ModuleDict": lambda: cls({"a": nn.ReLU()}),
    }
    return table.get(short, cls)()


def _all_types():
    nn._load_all_types()
    return sorted((n, c) for n, c in nn.module_type_table().items()
                  if n.startswith("qops.nn.") and ".qat." not in n)


@pytest.mark.parametrize("name", [n for n, _ in _all_types()])
def test_every_module_type_round_trips(name, tmp_path):
    cls = nn.module_type_table()[name]
    m = _example(name, cls)
    m.eval()
    path = tmp_path / "m.npz"
    qops.save(m, path)
    back = qops.load(path)
    assert type(back) is cls and repr(back) == repr(m)
    a, b = m.state_dict(), back.state_dict()
    assert list(a) == list(b)
    for k in a:
        if isinstance(a[k], qops.QTensor):
            assert a[k].equal(b[k])
        elif a[k] is not None:
            np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]))


def test_qat_modules_refuse_to_save(tmp_path):
    import qops.quantization as qz
    from qops.nn import qat as nnqat
    with pytest.raises(TypeError, match="convert\\(\\) the model before qops.save"):
        qops.save(nnqat.Linear(3, 2, qconfig=qz.default_qat_qconfig), tmp_path / "q.npz")


# -- issue 19: qops.load on hostile files -----------------------------------------------------
def _hostile_files(tmp_path):
    """(label, path) of files that made qops.load raise raw exceptions."""
    model = nn.Sequential(nnq.Quantize(0.1, 3, qops.quint8), nnq.Linear(4, 3))
    good = tmp_path / "good.npz"
    qops.save(model, good)
    blob = good.read_bytes()
    files = []

    def put(label, data):
        p = tmp_path / f"hostile{len(files)}.npz"
        p.write_bytes(data)
        files.append((label, p))

    put("random bytes", np.random.default_rng(19).bytes(3000))
    put("empty", b"")
    put("truncated", blob[:len(blob) // 2])
    raw = bytearray(blob)
    start = raw.find(b"PK\x03\x04", 10) + 60             # inside a compressed entry
    raw[start:start + 8] = b"\xff" * 8
    put("corrupted deflate data", bytes(raw))

    head = '{"type": "qops.nn.Sequential", "config": {}, "state": {}, "children": {"0": '
    leaf = '{"type": "qops.nn.Identity", "config": {}, "state": {}, "children": {}}'
    text = ('{"format": "qops.nn.model", "version": 1, "model": ' + head * 900 + leaf
            + "}}" * 900 + "}")
    deep = io.BytesIO()
    np.savez(deep, __qops__=np.array(text))
    put("900 levels", deep.getvalue())

    def bad_index(m):
        m["model"]["children"]["1"]["state"]["weight"]["qtensor"]["int"] = ["a0"]
    put("array reference of the wrong type", _rewrite(good, tmp_path / "t.npz",
                                                      bad_index).read_bytes())
    with np.load(good) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["__qops__"]))
    key = meta["model"]["children"]["1"]["state"]["bias"]["array"]
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (2 ** 40,)})
    big = io.BytesIO()
    with zipfile.ZipFile(big, "w") as zf:
        for k, a in arrays.items():
            with zf.open(k + ".npy", "w") as f:
                if k == key:
                    f.write(header.getvalue() + b"\0" * 16)
                else:
                    np.lib.format.write_array(f, a)
    put("npy header declaring 4 TiB", big.getvalue())
    return files


# issue 19 #12: raw EOFError/zlib.error/TypeError/RecursionError/MemoryError; pickle advice
def test_issue19_load_raises_its_own_error(tmp_path):
    assert issubclass(qops.LoadError, ValueError)
    for label, path in _hostile_files(tmp_path):
        with pytest.raises(qops.LoadError) as info:
            qops.load(path)
        msg = str(info.value)
        assert str(path) in msg, (label, msg)
        assert "pickle" not in msg.lower(), (label, msg)
    with pytest.raises(qops.LoadError, match="no-such-file"):
        qops.load(tmp_path / "no-such-file.npz")


# issue 19 #13: a 3.9 KB file declaring Linear(40000, 40000) cost 1.6 GB and 2 s
@pytest.mark.parametrize("cls, config", [
    (nnq.Linear, dict(in_features=40000, out_features=40000)),
    (nn.Linear, dict(in_features=60000, out_features=60000)),
    (nnq.Conv2d, dict(in_channels=4096, out_channels=4096, kernel_size={"tuple": [7, 7]})),
    (nnq.LayerNorm, dict(normalized_shape={"tuple": [40000, 40000]})),
    (nn.BatchNorm2d, dict(num_features=10 ** 9)),
    (nn.Embedding, dict(num_embeddings=10 ** 7, embedding_dim=1000)),
    (nn.LSTM, dict(input_size=4, hidden_size=4, num_layers=10 ** 7)),
    (nn.GRUCell, dict(input_size=40000, hidden_size=40000)),
    (nn.MultiheadAttention, dict(embed_dim=40000, num_heads=1)),
    (nn.TransformerEncoderLayer, dict(d_model=20000, nhead=1, dim_feedforward=20000))])
def test_issue19_load_checks_sizes_before_building(tmp_path, cls, config):
    import time
    import tracemalloc
    small = {nnq.Linear: lambda: nnq.Linear(4, 4), nn.Linear: lambda: nn.Linear(4, 4),
             nnq.Conv2d: lambda: nnq.Conv2d(4, 4, 1), nnq.LayerNorm: lambda: nnq.LayerNorm(4),
             nn.BatchNorm2d: lambda: nn.BatchNorm2d(4), nn.Embedding: lambda: nn.Embedding(4, 4),
             nn.LSTM: lambda: nn.LSTM(4, 4), nn.GRUCell: lambda: nn.GRUCell(4, 4),
             nn.MultiheadAttention: lambda: nn.MultiheadAttention(4, 1),
             nn.TransformerEncoderLayer: lambda: nn.TransformerEncoderLayer(4, 1, 8)}[cls]()
    good = tmp_path / "small.npz"
    qops.save(small, good)

    def grow(m):
        m["model"]["config"].update(config)
    bad = _rewrite(good, tmp_path / "big.npz", grow)
    assert bad.stat().st_size < 16000     # (an encoder layer: 16 small arrays)
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(qops.LoadError, match=r"module '<root>'.*declares \d+ elements"):
            qops.load(bad)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - t0 < 1.0
    assert peak < 20 << 20


# issue 19 #14: scale NaN/0/-1, zero point 1000, per-channel scheme with per-tensor qparams
def test_issue19_load_validates_qparams(tmp_path):
    model = nn.Sequential(OrderedDict([
        ("quant", nnq.Quantize(0.1, 3, qops.quint8)),
        ("body", nn.Sequential(OrderedDict([("fc", nnq.Linear(4, 3)),
                                            ("add", nnq.QFunctional())])))]))
    good = tmp_path / "good.npz"
    qops.save(model, good)
    with np.load(good) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["__qops__"]))
    body = meta["model"]["children"]["body"]["children"]

    def ref(node, key):
        return node["state"][key]["array"]
    cases = []
    for path, node in (("quant", meta["model"]["children"]["quant"]), ("body.fc", body["fc"]),
                       ("body.add", body["add"])):
        for key, value in (("scale", np.nan), ("scale", 0.0), ("scale", -1.0),
                           ("zero_point", 1000)):
            cases.append((rf"{path}\.{key}", {ref(node, key): np.array(value)}, None))

    def per_channel_scheme(m):
        m["model"]["children"]["body"]["children"]["fc"]["state"]["weight"]["qtensor"][
            "qscheme"] = "per_channel_affine"

    def nan_weight_scale(m):
        m["model"]["children"]["body"]["children"]["fc"]["state"]["weight"]["qtensor"][
            "scale"] = float("nan")
    cases.append((r"module 'body\.fc', 'weight'.*per_channel_affine with per-tensor", {},
                  per_channel_scheme))
    cases.append((r"module 'body\.fc', 'weight'", {}, nan_weight_scale))
    for i, (where, add, edit) in enumerate(cases):
        with pytest.raises(qops.LoadError, match=where):
            qops.load(_rewrite(good, tmp_path / f"bad{i}.npz", edit, add=add))
    assert qops.load(good).body.fc.zero_point == model.body.fc.zero_point


def test_attributes_set_after_construction_are_saved_or_refused(tmp_path):
    # issue 20: qops.save silently dropped attributes set after __init__.
    m = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    m[0].note, m[1].inplace, m.tag = (1, 2.5, "x"), True, {"k": [1, 2]}
    qops.save(m, tmp_path / "a.npz")
    back = qops.load(tmp_path / "a.npz")
    assert back[0].note == (1, 2.5, "x") and back[1].inplace is True
    assert back.tag == {"k": [1, 2]}
    m[1].hook = lambda x: x
    with pytest.raises(TypeError, match="attribute 'hook'.*set after it was built"):
        qops.save(m, tmp_path / "b.npz")


def test_transformer_of_real_size_saves_and_loads(tmp_path):
    # qops.load's size check counts a transformer layer's weights in its children (which its
    # constructor builds); a container Transformer declares none of its own
    m = nn.Transformer(nn.TransformerEncoder(nn.TransformerEncoderLayer(256, 4, 512), 1),
                       nn.TransformerDecoder(nn.TransformerDecoderLayer(256, 4, 512), 1),
                       256, 4).eval()
    qops.save(m, tmp_path / "t.npz")
    back = qops.load(tmp_path / "t.npz")
    x = np.random.default_rng(0).normal(size=(3, 2, 256)).astype(np.float32)
    np.testing.assert_array_equal(back(x, x[:2]), m(x, x[:2]))
