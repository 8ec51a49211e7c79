"""Public resize ops (see qops/_ops/__init__.py for the wrapper contract)."""
__all__ = []
