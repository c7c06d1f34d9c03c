"""Sphinx configuration for the steindiag documentation.

Build (as CI does): ``docs/build.sh`` runs the example scripts (their figures and printed
tables are shown in the pages) and then ``sphinx-build -W -b html docs docs/_build/html``.
"""

import steindiag

project = "steindiag"
author = "steindiag developers"
copyright = "steindiag developers"  # noqa: A001 - Sphinx's name
version = release = steindiag.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "matplotlib.sphinxext.plot_directive",
]

# API pages are generated from the numpydoc docstrings.
autosummary_generate = True
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
# Every public docstring must have these sections right (checked at build time, -W fails).
numpydoc_validation_checks = {"GL08", "PR01", "PR02", "RT01", "SS01"}
# Result dataclasses document their fields under "Attributes" (as scipy's result classes do);
# their generated __init__ has no docstring of its own.
numpydoc_validation_exclude = {r"\.SteinThinning$", r"\.SteinVariational$", r"\.MinKSDFit$",
                               r"\.__init__$"}

# Figures drawn at build time (small, pure NumPy): matplotlib's plot directive.
plot_include_source = True
plot_html_show_source_link = False
plot_html_show_formats = False
plot_formats = [("png", 110)]
plot_rcparams = {"figure.figsize": (7.0, 4.5)}

# A class that subclasses xarray.Dataset (Diagnosis) is documented with its own methods only
# (api.rst: ``:template: class_own_methods.rst``), not the Dataset's hundreds.
templates_path = ["_templates"]
exclude_patterns = ["_build", "build.sh"]
default_role = "literal"

html_theme = "pydata_sphinx_theme"
html_title = "steindiag"
html_static_path = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "icon_links": [],
}
html_show_sourcelink = False
