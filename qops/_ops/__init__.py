"""Public op wrappers, one module per family; `qops.functional` re-exports them all.

A wrapper validates its arguments once (naming the bad one), prepares qparams with
`qops._qparams`, calls the active backend's kernel (`qops._config.impl(family)`), and wraps
the result in a QTensor. Kernels run with bounds checks off, so nothing unvalidated may reach
them.
"""
