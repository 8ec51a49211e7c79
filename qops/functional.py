"""qops.functional: the quantized operators, named and called as torch.ao.nn.quantized.functional.

Every op validates its inputs once, then runs on the active backend (`qops.set_backend`).
The implementations live in qops/_ops/<family>.py; this module is the public list.
"""
from qops._ops.activation import *  # noqa: F401,F403
from qops._ops.arith import *  # noqa: F401,F403
from qops._ops.conv import *  # noqa: F401,F403
from qops._ops.conv_transpose import *  # noqa: F401,F403
from qops._ops.embedding import *  # noqa: F401,F403
from qops._ops.linear import *  # noqa: F401,F403
from qops._ops.norm import *  # noqa: F401,F403
from qops._ops.pool import *  # noqa: F401,F403
from qops._ops.quant import *  # noqa: F401,F403
from qops._ops.reduce import *  # noqa: F401,F403
from qops._ops.resize import *  # noqa: F401,F403
from qops._ops.rnn import *  # noqa: F401,F403
from qops._ops.sort import *  # noqa: F401,F403
from qops._qtensor import dequantize, quantize_per_channel, quantize_per_tensor  # noqa: F401
