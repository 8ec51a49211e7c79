"""Sphinx configuration: the user guide (Markdown, via MyST) and the API reference (autodoc)."""
import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "qops"
author = "the qops developers"
copyright = "2026, the qops developers"
release = __import__("qops").__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
myst_heading_anchors = 3
exclude_patterns = ["_build"]
html_theme = "alabaster"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False}
# The docstrings' "Arguments" style is NumPy's.
napoleon_google_docstring = False
napoleon_numpy_docstring = True
# Links into the repository from the README (tests/, qops/...) point outside the site, and
# names such as Linear exist in nn, nn.quantized and nn.quantized.dynamic alike.
suppress_warnings = ["myst.xref_missing", "ref.python"]
