"""Memory layouts of raw integer arrays: channels-last and other permuted dense blocks.

PyTorch keeps a channels-last tensor channels-last through elementwise ops (its
"preserve_format"): the op runs over the memory as it lies. qops does the same, so
that a model in NHWC memory pays no transpose for relu, add or dequantize; ops that need C
order take their input through QTensor._cint, which transposes such blocks in tiles.
"""


# The channels-last order of a 4-d image and its inverse, returned shared (callers read the
# orders memory_order and inverse return, never change them): no list built per call.
_CL4 = [0, 2, 3, 1]
_CL4_BACK = [0, 3, 1, 2]


def memory_order(a):
    """`a`'s axes from outermost to innermost in memory when `a` is a permuted C-contiguous
    block (a channels-last NCHW view, a transpose), else None; None too when `a` is already
    C-contiguous (nothing to undo)."""
    if a.ndim == 4:
        # the common case first: a channels-last image with C, H, W > 1, known by its strides
        # (the general rule below gives the same order, with sorting, on every small op); such
        # an array is never also C-contiguous
        n, c, h, w = a.shape
        s, it = a.strides, a.itemsize
        if (c > 1 and h > 1 and w > 1 and s[1] == it and s[3] == c * it
                and s[2] == w * c * it and (n == 1 or s[0] == h * w * c * it)):
            return _CL4
    if a.flags.c_contiguous or a.ndim < 2:
        return None
    # axes of size 1 have no place in memory (numpy gives them any stride, e.g. after a
    # reshape of a transposed view): the others by stride, each size-1 axis before the first
    # of them with a larger index, so an image of a batch of 1 is still (N, H, W, C)
    order = sorted((i for i in range(a.ndim) if a.shape[i] != 1), key=lambda i: -a.strides[i])
    for i in (i for i in range(a.ndim) if a.shape[i] == 1):
        order.insert(next((k for k, j in enumerate(order) if j > i), len(order)), i)
    return order if a.transpose(order).flags.c_contiguous else None


def inverse(order):
    """The permutation undoing `order`: a.transpose(order).transpose(inverse(order)) is a."""
    if order is _CL4:
        return _CL4_BACK
    inv = [0] * len(order)
    for i, axis in enumerate(order):
        inv[axis] = i
    return inv


def channels_last_order(ndim):
    """The memory order of channels-last data of `ndim` dims: N, the spatial axes, C."""
    return [0] + list(range(2, ndim)) + [1]


# the same orders (lists, as memory_order returns) and their inverses, built once: the
# layout checks run on every call of a small op
CL_ORDER = {n: channels_last_order(n) for n in range(3, 9)}
CL_ORDER[4] = _CL4
CL_BACK = {n: inverse(o) for n, o in CL_ORDER.items()}


def is_channels_last(a):
    """True when `a` (N, C, ...) lies channels last in memory and is not also C-contiguous
    (then any kernel can take it as it is)."""
    return a.ndim >= 3 and memory_order(a) == CL_ORDER.get(a.ndim)


def elementwise(kernel, raw, *args):
    """kernel(raw, *args) for a kernel of one value per element, run over `raw`'s memory in
    its own order: the result has `raw`'s layout. Other layouts go to the kernel as they are."""
    order = memory_order(raw)
    if order is None:
        return kernel(raw, *args)
    return kernel(raw.transpose(order), *args).transpose(inverse(order))


def in_memory_order(a, axis):
    """(a in its memory order, where `axis` went, a function putting a same-layout result
    back in `a`'s axis order): for per-channel kernels of one value per element."""
    order = memory_order(a)
    if order is None:
        return a, axis, _same
    back = inverse(order)
    return a.transpose(order), order.index(axis), lambda r: r.transpose(back)


def _same(r):
    return r


def elementwise2(kernel, ra, rb, *args):
    """As elementwise, for a kernel of two same-shape operands laid out alike."""
    if ra.flags.c_contiguous:
        # (memory_order's answer for C order, without its call)
        return kernel(ra, rb, *args)
    order = memory_order(ra)
    if order is None or ra.strides != rb.strides:
        return kernel(ra, rb, *args)
    return kernel(ra.transpose(order), rb.transpose(order), *args).transpose(inverse(order))
