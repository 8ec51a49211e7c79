"""Readable numpy reference implementations, one module per op family.

Each module mirrors ``qops/_fast/<family>.pyx``: same function names, same arguments. These
define what the ops compute; the fast kernels are tested bit for bit against them.
"""
