"""Sphinx configuration of the API reference: autodoc of the public names of
``tiramisu_py`` and ``schedules`` (their ``__all__``), and the user guide
(``docs/guide``, Markdown through myst-parser).

    python3 -m sphinx -W -b html docs/api build/docs
"""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)

project = "tiramisu_py"
author = "the tiramisu_py authors"
copyright = "the tiramisu_py authors"

extensions = ["sphinx.ext.autodoc", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"

# torch and the CUDA bindings are optional: documenting never needs them
autodoc_mock_imports = ["torch", "cuda"]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
add_module_names = False

# the docstrings name internal modules and functions (:mod:`tiramisu_py.commands.atomic`,
# :func:`schedules.sparse_conv2d`) that the reference does not document: only
# the public names are; a reference to an undocumented object is plain text
nitpicky = False
myst_heading_anchors = 3

html_theme = "alabaster"
exclude_patterns = ["_build"]
