"""torchvision's quantizable classification models, imported into qops (random weights).

The real-world check of graph capture: architectures qops did not design. Each model is
fused, prepared, calibrated and converted by PyTorch (x86 engine), then imported with
`qops.nn.quantized.from_torch`; its int8 output must equal PyTorch's bit for bit. The float
version is also imported and quantized by qops' own flow: scales agree to a few ulp per layer
and zero points to one step (observers see float convs summed in another order, see
tests/test_quantization_parity.py; that drift compounds over a deep model), and the top-1
class must agree. (That flow uses min/max activation observers: a histogram observer's
threshold search is discontinuous, so an ulp in its input can move a scale by a bin, 0.5%
seen on resnet18; fed identical data it is bit-exact, tests/test_quantization.py.)

torchvision is found as installed or under QOPS_TORCHVISION_PATH (.ci/run unpacks it there:
its compiled extension does not load beside the CPU build of torch; the model code does).
Small inputs keep the suite fast; the rounding paths do not depend on the image size.
"""
import copy
import os
import subprocess
import sys

import numpy as np
import pytest

import qops
import qops.nn as qnn
import qops.nn.quantized as nnq
import qops.quantization as qq

from conftest import torch_or_skip

MODELS = {"resnet18": 64, "resnet50": 64, "mobilenet_v2": 64, "mobilenet_v3_large": 64,
          "shufflenet_v2_x1_0": 64, "googlenet": 64, "inception_v3": 80}
SCALE_RTOL = 2e-5   # observed float min/max: ulps per layer, compounding over ~100 layers


def _tv():
    torch_or_skip()
    from qops.nn._torchvision import quantization_models
    q = quantization_models()
    if q is None:
        if os.environ.get("QOPS_REQUIRE_TORCHVISION") == "1":
            pytest.fail("QOPS_REQUIRE_TORCHVISION=1 but torchvision's model code is not found")
        pytest.skip("torchvision is not installed (QOPS_TORCHVISION_PATH)")
    return q


def _float_model(name):
    torch = torch_or_skip()
    q = _tv()
    torch.manual_seed(0)
    kw = dict(weights=None, quantize=False)
    if name in ("googlenet", "inception_v3"):
        kw.update(aux_logits=False, init_weights=True)
    m = getattr(q, name)(**kw).eval()
    m.fuse_model()
    return m


def _minmax_mapping(mapping, q):
    """`mapping` (PyTorch's or qops' x86 default) with min/max activation observers
    (reduce_range) globally; `q` is torch.ao.quantization or qops.quantization."""
    return mapping.set_global(q.QConfig(activation=q.MinMaxObserver.with_args(reduce_range=True),
                                        weight=q.get_default_qconfig("x86").weight))


def _same_modules_and_qparams(theirs, ours, zp_tol=1):
    """Every quantized module of PyTorch's converted model is in qops' under its name, of the
    same type, its zero point within zp_tol (a scale's last-ulp drift can move one) and its
    scale within SCALE_RTOL (observers see float layers summed in another order); returns
    how many there are."""
    mods = dict(ours.named_modules())
    checked = 0
    for n, mm in theirs.named_modules():
        if hasattr(mm, "scale") and not callable(mm.scale):
            mine = mods[n]
            assert type(mine).__name__ == type(mm).__name__, n
            zp = int(np.asarray(mine.zero_point).ravel()[0])
            assert abs(zp - int(mm.zero_point)) <= zp_tol, n
            np.testing.assert_allclose(float(np.asarray(mine.scale).ravel()[0]),
                                       float(mm.scale), rtol=SCALE_RTOL, err_msg=n)
            checked += 1
    return checked


def _data(torch, size, n, seed):
    """n batches of 2 images size x size (or clips of the sizes in a tuple)."""
    g = torch.Generator().manual_seed(seed)
    dims = (size, size) if isinstance(size, int) else tuple(size)
    return [torch.randn(2, 3, *dims, generator=g) for _ in range(n)]


def _torch_int8(torch, m, calib, fast_observers=False):
    m = copy.deepcopy(m)
    m.qconfig = torch.ao.quantization.get_default_qconfig("x86")
    if fast_observers:
        # The import's exactness does not depend on how qparams were chosen; min/max
        # observers calibrate in a fraction of the histogram observers' time.
        tq = torch.ao.quantization
        m.qconfig = tq.QConfig(activation=tq.MinMaxObserver.with_args(reduce_range=True),
                               weight=m.qconfig.weight)
    torch.ao.quantization.prepare(m, inplace=True)
    with torch.no_grad():
        for c in calib:
            m(c)
    torch.ao.quantization.convert(m, inplace=True)
    return m


@pytest.mark.parametrize("name", sorted(MODELS))
def test_torchvision_int8_import_is_exact(name):
    torch = torch_or_skip()
    m = _float_model(name)
    size = MODELS[name]
    tm = _torch_int8(torch, m, _data(torch, size, 1, 1), fast_observers=True)
    g = nnq.from_torch(tm)
    x = _data(torch, size, 1, 2)[0]
    with torch.no_grad():
        want = tm(x).numpy()
    np.testing.assert_array_equal(g(x.numpy()), want)
    if name not in ("mobilenet_v3_large", "shufflenet_v2_x1_0", "resnet18"):
        return
    # The captured model saves and loads like any qops model.
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        qops.save(g, os.path.join(tmp, "m.npz"))
        back = qops.load(os.path.join(tmp, "m.npz"))
    np.testing.assert_array_equal(back(x.numpy()), want)


@pytest.mark.parametrize("name", ["resnet18", "shufflenet_v2_x1_0"])
def test_torchvision_float_import_then_qops_flow(name):
    torch = torch_or_skip()
    m = _float_model(name)
    size = MODELS[name]
    calib = _data(torch, size, 1, 1)
    tm = _torch_int8(torch, m, calib, fast_observers=True)
    g = qnn.from_torch(m)
    g.qconfig = qq.QConfig(activation=qq.MinMaxObserver.with_args(reduce_range=True),
                           weight=qq.get_default_qconfig("x86").weight)
    qq.prepare(g, inplace=True)
    for c in calib:
        g(c.numpy())
    qq.convert(g, inplace=True)
    ours = dict(g.named_modules())
    checked = 0
    for n, mm in tm.named_modules():
        if n in ours and hasattr(mm, "scale") and not callable(mm.scale):
            mine = ours[n]
            # A scale's last-ulp drift can move a zero point by one (resnet18: 66 vs 67).
            assert abs(int(np.asarray(mine.zero_point).ravel()[0]) - int(mm.zero_point)) <= 1, n
            np.testing.assert_allclose(float(np.asarray(mine.scale).ravel()[0]),
                                       float(mm.scale), rtol=SCALE_RTOL, err_msg=n)
            checked += 1
    assert checked > 20
    x = _data(torch, size, 1, 2)[0]
    with torch.no_grad():
        want = tm(x).numpy()
    got = g(x.numpy())
    assert (got.argmax(1) == want.argmax(1)).all()


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_large", "googlenet"])
def test_torchvision_fx_quantized_import_is_exact(name):
    # torchvision's plain float classes, quantized by PyTorch's graph mode (prepare_fx /
    # convert_fx), whose converted graph calls torch.ops.quantized.* between the modules.
    torch = torch_or_skip()
    _tv()
    import torchvision.models as tvm
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
    tq = torch.ao.quantization
    torch.manual_seed(0)
    kw = dict(aux_logits=False, init_weights=True) if name == "googlenet" else {}
    m = getattr(tvm, name)(weights=None, **kw).eval()
    size = MODELS[name]
    x = _data(torch, size, 1, 2)[0]
    # PyTorch's x86 mapping (fixed-qparams ops included) with min/max activation observers
    mapping = _minmax_mapping(get_default_qconfig_mapping("x86"), tq)
    p = prepare_fx(m, mapping, (x,))
    with torch.no_grad():
        p(_data(torch, size, 1, 1)[0])
    q = convert_fx(p)
    g = nnq.from_torch(q)
    with torch.no_grad():
        want = q(x).numpy()
    np.testing.assert_array_equal(g(x.numpy()), want)


# torchvision's float classes beyond the quantizable seven, whose forwards use what those do
# not: SiLU and sigmoid squeeze-excitation and stochastic depth (EfficientNet), GELU,
# F.layer_norm on permuted tensors and learned layer scales (ConvNeXt), grouped convs with
# squeeze-excitation (RegNet).
MORE = {"efficientnet_b0": 64, "convnext_tiny": 64, "regnet_y_400mf": 64}


def _import_and_graph_mode(torch, m, size, zp_tol=1, modules=20, import_equal=1.0):
    """A float torchvision model `m` (eval) through every route into qops, checked against
    PyTorch: the float import; PyTorch's graph-mode int8 model imported (exact, or at least
    the share `import_equal` of outputs equal where float attention feeds a quantize);
    qops' own graph mode on the float import with the same mapping and data (PyTorch's
    modules and qparams, at least `modules` of them, to float drift); all saved and loaded."""
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    from qops.quantization import quantize_fx as qfx
    tq = torch.ao.quantization
    x, calib = _data(torch, size, 1, 2)[0], _data(torch, size, 1, 1)
    # numpy float32 layers, sums in another order than oneDNN's
    g = qnn.from_torch(m)
    with torch.no_grad():
        want = m(x).numpy()
    np.testing.assert_allclose(g(x.numpy()), want, rtol=1e-4,
                               atol=1e-5 * float(np.abs(want).max()))
    p = prepare_fx(copy.deepcopy(m), _minmax_mapping(get_default_qconfig_mapping("x86"), tq),
                   (x,))
    with torch.no_grad():
        for c in calib:
            p(c)
    theirs = convert_fx(p)
    with torch.no_grad():
        want = theirs(x).numpy()
    # (where attention runs in float before its output is quantized, numpy's sums could move
    # a value by a step; exact on these models)
    imported = nnq.from_torch(theirs)
    if import_equal == 1.0:
        np.testing.assert_array_equal(imported(x.numpy()), want)
    else:
        got = imported(x.numpy())
        assert np.mean(got == want) >= import_equal
        assert (got.argmax(1) == want.argmax(1)).all()
    gp = qfx.prepare_fx(g, _minmax_mapping(qfx.get_default_qconfig_mapping("x86"), qq),
                        (x.numpy(),))
    for c in calib:
        gp(c.numpy())
    ours = qfx.convert_fx(gp)
    assert _same_modules_and_qparams(theirs, ours, zp_tol) >= modules
    got = ours(x.numpy())
    assert (got.argmax(1) == want.argmax(1)).all()
    # (ConvNeXt's layer scales and ViT's class token are "attr" nodes of the graph)
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for model, out in ((g, g(x.numpy())), (imported, want), (ours, got)):
            qops.save(model, os.path.join(tmp, "m.npz"))
            np.testing.assert_array_equal(qops.load(os.path.join(tmp, "m.npz"))(x.numpy()), out)


@pytest.mark.parametrize("name", sorted(MORE))
def test_torchvision_more_models_import_and_graph_mode(name):
    # ConvNeXt's converted graph calls torch.ops.quantized.layer_norm
    torch = torch_or_skip()
    _tv()
    import torchvision.models as tvm
    torch.manual_seed(0)
    _import_and_graph_mode(torch, getattr(tvm, name)(weights=None).eval(), MORE[name])


def test_torchvision_vision_transformer():
    # torchvision's ViT class, small: patch conv, class token (a parameter expanded and
    # concatenated), torch._assert on shapes, float attention (PyTorch quantizes the linears
    # and layer norms around it, not it), GELU.
    torch = torch_or_skip()
    _tv()
    import importlib
    vt = importlib.import_module("torchvision.models.vision_transformer")
    torch.manual_seed(0)
    m = vt.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4,
                             hidden_dim=64, mlp_dim=128, num_classes=10).eval()
    torch.nn.init.normal_(m.heads.head.weight)     # (torchvision zeroes the head)
    _import_and_graph_mode(torch, m, 32, zp_tol=0, modules=10)


def _small_transformer(torch, name):
    """Small configurations of torchvision's Swin (V1, V2, 3-D), MaxViT and MViT (V2)
    classes, and their input size: windows smaller than the map (so shifted windows and
    their mask run), a window larger than a later map (no shift there, padding)."""
    import importlib
    torch.manual_seed(0)
    if name.startswith("swin"):
        sw = importlib.import_module("torchvision.models.swin_transformer")
        v2 = dict(block=sw.SwinTransformerBlockV2, downsample_layer=sw.PatchMergingV2)
        m = sw.SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2, 2],
                               num_heads=[2, 4, 4], window_size=[3, 3], num_classes=10,
                               **(v2 if name == "swin_v2" else {}))
        size = 40          # 10x10, 5x5 (padded to 6x6), 3x3 (no shift)
    elif name == "swin3d":
        sw = importlib.import_module("torchvision.models.video.swin_transformer")
        m = sw.SwinTransformer3d(patch_size=[2, 4, 4], embed_dim=32, depths=[2, 2],
                                 num_heads=[2, 4], window_size=[2, 3, 3], num_classes=10,
                                 stochastic_depth_prob=0.0)
        size = (4, 36, 36)    # 2x9x9, 2x5x5: no shift in time (the window covers it)
    elif name == "mvit":
        mv = importlib.import_module("torchvision.models.video.mvit")
        cfg = [mv.MSBlockConfig(1, 16, 16, [3, 3, 3], [3, 3, 3], [1, 1, 1], [1, 2, 2]),
               mv.MSBlockConfig(2, 16, 32, [3, 3, 3], [3, 3, 3], [1, 2, 2], [1, 1, 1])]
        m = mv.MViT(spatial_size=(32, 32), temporal_size=4, block_setting=cfg,
                    residual_pool=True, residual_with_cls_embed=False, rel_pos_embed=True,
                    proj_after_attn=True, dropout=0.0, num_classes=10)
        size = (4, 32, 32)    # 2x8x8 tokens; keys pooled 2x, then queries
    else:
        mv = importlib.import_module("torchvision.models.maxvit")
        m = mv.MaxVit(input_size=(32, 32), stem_channels=16, partition_size=2,
                      block_channels=[16, 32], block_layers=[1, 1], head_dim=8,
                      stochastic_depth_prob=0.0, num_classes=10)
        size = 32
    for mod in m.modules():
        if isinstance(mod, torch.nn.Linear) and mod.out_features == 10:
            torch.nn.init.normal_(mod.weight)     # (a zeroed or tiny head ties the classes)
    return m.eval(), size


@pytest.mark.parametrize("name", ["swin", "swin_v2", "swin3d", "maxvit", "mvit"])
def test_torchvision_windowed_transformers(name):
    # Swin's window attention, patch merging and relative position bias are torch.fx.wrap-ped
    # torchvision functions (PyTorch's graph mode keeps them float; qops/nn/_swin.py computes
    # them); V2 adds cosine attention, a position MLP and quantized::mul(16, q); MaxViT's
    # attention is torch.einsum, its partitions torch.swapaxes. MViT's wrapped functions
    # add to their arguments in place (its attention calls _add_shortcut for that alone), its
    # torch.matmul becomes quantized::matmul. Their float attention feeds a
    # quantize: numpy's sums differ from PyTorch's in the last bits, so a value at a rounding
    # boundary may land a step away and that step travels (measured: 1 value of 55,296 at
    # the first such quantize of swin_v2_t at 96x96; these small ones came out exact on
    # AVX2), so the import's outputs are compared by share.
    torch = torch_or_skip()
    _tv()
    m, size = _small_transformer(torch, name)
    _import_and_graph_mode(torch, m, size, modules=8, import_equal=0.9)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_large"])
def test_torchvision_graph_mode_in_qops_matches_torch(name):
    # issue 21: the unmodified float torchvision class, quantized by qops' own prepare_fx /
    # convert_fx (no stubs, no fuse list) and by PyTorch's, with the same mapping and data.
    torch = torch_or_skip()
    _tv()
    import torchvision.models as tvm
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    from qops.quantization import quantize_fx as qfx
    tq = torch.ao.quantization
    torch.manual_seed(0)
    m = getattr(tvm, name)(weights=None).eval()
    size = MODELS[name]
    x = _data(torch, size, 1, 2)[0]
    calib = _data(torch, size, 1, 1)
    theirs_map = _minmax_mapping(get_default_qconfig_mapping("x86"), tq)
    p = prepare_fx(copy.deepcopy(m), theirs_map, (x,))
    with torch.no_grad():
        for c in calib:
            p(c)
    theirs = convert_fx(p)
    ours_map = _minmax_mapping(qfx.get_default_qconfig_mapping("x86"), qq)
    gp = qfx.prepare_fx(qnn.from_torch(m), ours_map, (x.numpy(),))
    for c in calib:
        gp(c.numpy())
    ours = qfx.convert_fx(gp)
    assert _same_modules_and_qparams(theirs, ours) > 20
    with torch.no_grad():
        want = theirs(x).numpy()
    assert (ours(x.numpy()).argmax(1) == want.argmax(1)).all()


def _tv_float(torch, name, train=False):
    _tv()
    import torchvision.models as tvm
    torch.manual_seed(0)
    m = getattr(tvm, name)(weights=None)
    for mod in m.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0           # training-mode dropout would draw different masks
    return m.train(train)


def _graph_mode_both(torch, name, qat):
    """PyTorch's and qops' graph-mode int8 models of torchvision's float `name` with the
    default x86 mappings (histogram observers; or QAT fake quantizers, two training-mode
    batches and no optimizer step), and an input."""
    from torch.ao.quantization import (
        get_default_qat_qconfig_mapping,
        get_default_qconfig_mapping,
    )
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx, prepare_qat_fx

    from qops.quantization import quantize_fx as qfx
    m = _tv_float(torch, name, qat)
    size = MODELS[name]
    x = _data(torch, size, 1, 2)[0]
    calib = _data(torch, size, 2, 1)
    if qat:
        p = prepare_qat_fx(copy.deepcopy(m), get_default_qat_qconfig_mapping("x86"), (x,))
        gp = qfx.prepare_qat_fx(qnn.from_torch(m).train(), qfx.get_default_qat_qconfig_mapping(),
                                (x.numpy(),))
    else:
        p = prepare_fx(copy.deepcopy(m), get_default_qconfig_mapping("x86"), (x,))
        gp = qfx.prepare_fx(qnn.from_torch(m), qfx.get_default_qconfig_mapping(), (x.numpy(),))
    with torch.no_grad():
        for c in calib:
            p(c)
    for c in calib:
        gp(c.numpy())
    return convert_fx(p), qfx.convert_fx(gp), x


def _graph_mode_diffs(torch, theirs, ours, x, top1=True):
    mods = dict(ours.named_modules())
    rel, zpd, step = [], [], None
    for n, mm in theirs.named_modules():
        if hasattr(mm, "scale") and not callable(mm.scale):
            step = float(mm.scale)           # the last one: the classifier's
            mine = mods[n]
            assert type(mine).__name__ == type(mm).__name__, n
            zpd.append(abs(int(np.asarray(mine.zero_point).ravel()[0]) - int(mm.zero_point)))
            rel.append(abs(float(np.asarray(mine.scale).ravel()[0]) - float(mm.scale))
                       / float(mm.scale))
    assert len(rel) > 20
    with torch.no_grad():
        want = theirs(x).numpy()
    got = ours(x.numpy())
    d = np.abs(got - want) / step
    if top1:
        assert (got.argmax(1) == want.argmax(1)).all()
    return max(rel), max(zpd), float(np.mean(d < 1e-3)), float(d.max())


# Measured on torch 2.13.0+cpu (AVX2 Zen 3): (max relative scale difference, max zero-point
# difference, share of bit-exact outputs, max output difference in steps). mobilenet_v2's
# randomly initialised classifier quantizes to one value at 64 pixels: its 53 scales carry
# the check.
_HIST_MEASURED = {"resnet18": (1.9e-6, 0, 0.845, 2.0), "mobilenet_v2": (2.6e-7, 0, 1.0, 0.0)}
# The same on an AVX-512 CPU (Intel Xeon with AMX, torch's capability AVX512): PyTorch's float
# convs sum in another order there, and resnet18's 1000 outputs land on other sides of their
# rounding steps: 56.9% bit-exact (scales within 6.4e-7).
_HIST_MEASURED_AVX512 = {"resnet18": (6.4e-7, 0, 0.569, 2.0),
                         "mobilenet_v2": (2.6e-7, 0, 1.0, 0.0)}


@pytest.mark.parametrize("name", sorted(_HIST_MEASURED))
def test_torchvision_default_mapping_graph_mode_matches_torch(name):
    # issue 21: PyTorch's default x86 mapping as is (HistogramObserver activations). The
    # observers are bit-exact on equal inputs (next test); the float layers before them sum
    # in another order, and over 20-50 layers that ulp drift reaches 2e-6 in a scale.
    torch = torch_or_skip()
    rel, zpd, exact, steps = _graph_mode_diffs(torch, *_graph_mode_both(torch, name, False))
    measured = (_HIST_MEASURED_AVX512 if torch.backends.cpu.get_cpu_capability() == "AVX512"
                else _HIST_MEASURED)
    m_rel, m_zpd, m_exact, m_steps = measured[name]
    assert rel <= 2 * m_rel + 5e-7 and zpd <= m_zpd
    assert exact >= m_exact - 0.02 and steps <= m_steps + 1e-3


def test_histogram_observer_bit_exact_on_resnet18_activations():
    # Every observer of PyTorch's prepared resnet18, replayed call by call into qops'
    # HistogramObserver: the same histograms, min/max and qparams, bit for bit.
    torch = torch_or_skip()
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import prepare_fx
    m = _tv_float(torch, "resnet18")
    x = _data(torch, MODELS["resnet18"], 1, 1)[0]
    p = prepare_fx(m, get_default_qconfig_mapping("x86"), (x,))
    calls = {}
    for mod in p.modules():
        if type(mod).__name__ == "HistogramObserver":
            mod.register_forward_pre_hook(
                lambda mod, args: calls.setdefault(id(mod), (mod, []))[1].append(
                    args[0].detach().numpy().copy()))
    with torch.no_grad():
        p(x)
    assert len(calls) > 20
    for mod, seen in calls.values():
        ours = qq.HistogramObserver(reduce_range=True)
        for v in seen:
            ours(v)
        assert float(ours.min_val) == float(mod.min_val)
        assert float(ours.max_val) == float(mod.max_val)
        np.testing.assert_array_equal(np.asarray(ours.histogram), mod.histogram.numpy())
        s, z = ours.calculate_qparams()
        ts, tz = mod.calculate_qparams()
        assert float(np.asarray(s).ravel()[0]) == float(ts) and int(np.asarray(z).ravel()[0]) \
            == int(tz)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_torchvision_prepare_qat_fx_matches_torch(name):
    # QAT graph mode on the float class in training mode. Its calibration is chaotic in
    # PyTorch itself: a batch norm's batch statistics move with every rounding flip of the
    # fake-quantized input, and the flips follow the ulps of the scales. Raising every
    # resnet18 batch-norm weight by one ulp moves PyTorch's own scales by up to 1.1% (five
    # zero points by one); qops against PyTorch, measured: resnet18 2.4% (six zero points
    # by one), mobilenet_v2 1.6% (none); outputs 2-7% bit-exact, at most 3 steps apart. On an
    # AVX-512 CPU (Intel AMX), where PyTorch's float convs sum in another order: resnet18 2.0%
    # (zero points up to 2 apart), mobilenet_v2 1.7% (none).
    # Top-1 is not compared: the randomly initialised classifier's outputs lie within a few
    # steps of each other. The small models of tests/test_quantize_fx.py agree to ulps.
    #
    # The comparison runs in a fresh interpreter: after the rest of the suite the same
    # comparison came out differently (mobilenet_v2: zero points 2 apart, scales 3.1%, top-1
    # 168 against 475), alone it gives the figures above every time. Some process state left
    # by earlier tests (not isolated yet; not torch's thread count, engine or RNG seeds, which
    # the test fixes or which were ruled out) tips the chaos; a fresh process makes the test
    # a reproducible measurement.
    torch = torch_or_skip()
    if os.environ.get("QOPS_QAT_PARITY_CHILD") != "1":
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
             "no:warnings", f"{__file__}::test_torchvision_prepare_qat_fx_matches_torch[{name}]"],
            env=dict(os.environ, QOPS_QAT_PARITY_CHILD="1"), capture_output=True, text=True,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), timeout=900)
        if "1 skipped" in done.stdout:
            pytest.skip("the child process skipped: " + done.stdout[-300:])
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        assert "1 passed" in done.stdout, done.stdout[-2000:]
        return
    rel, zpd, exact, steps = _graph_mode_diffs(torch, *_graph_mode_both(torch, name, True),
                                               top1=False)
    assert rel <= 0.05 and zpd <= 2 and steps <= 6
