"""Sphinx configuration for the skprivfact documentation.

Build from the repository root with::

    python -m sphinx -W -b html doc doc/_build/html
"""

import os
import sys

from docutils import nodes

# Document the source tree itself, installed or not.
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import skprivfact  # noqa: E402

# -- Project -----------------------------------------------------------------

project = "skprivfact"
author = "The skprivfact developers"
copyright = "The skprivfact developers"
release = skprivfact.__version__
version = ".".join(release.split(".")[:2])

# -- General -----------------------------------------------------------------

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "_templates", "Thumbs.db", ".DS_Store"]
root_doc = "index"
default_role = "literal"

autosummary_generate = True
# Signatures show the defaults only; the types live in the numpydoc sections.
autodoc_typehints = "none"

# -- numpydoc ------------------------------------------------------------------

numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
# Every docstring rendered is validated. The exclusions are scikit-learn's own:
# RT02 because a return value is named ("X : ndarray ..."), GL01/GL02 for the
# placement of the quotes, and ES01/SA01/EX01 are not required everywhere.
numpydoc_validation_checks = {"all", "RT02", "GL01", "GL02", "ES01", "SA01", "EX01"}

# Methods inherited from scikit-learn (``set_output``, ``get_metadata_routing``)
# point to labels of scikit-learn's documentation, and docstrings written in its
# style use terms of its glossary (``:term:`fit```). The build must work
# offline, without intersphinx, so these exact labels and terms, and no others,
# are linked to scikit-learn's web pages; any other unresolved label or term
# still warns.
SKLEARN_URL = "https://scikit-learn.org/stable/"
SKLEARN_LABELS = {
    "metadata_routing": ("metadata_routing.html", "Metadata routing"),
    "accuracy_score": (
        "modules/model_evaluation.html#accuracy-score",
        "Accuracy score",
    ),
    "r2_score": (
        "modules/model_evaluation.html#r2-score",
        "R² score, the coefficient of determination",
    ),
    "df_output_transform": (
        "developers/develop.html#df-output-transform",
        "Developer API for set_output",
    ),
    "sphx_glr_auto_examples_miscellaneous_plot_set_output.py": (
        "auto_examples/miscellaneous/plot_set_output.html",
        "Introducing the set_output API",
    ),
}
SKLEARN_TERMS = {
    "fit",
    "fit_transform",
    "meta-estimator",
    "n_jobs",
    "partial_fit",
    "predict",
    "predict_proba",
    "random_state",
    "score",
    "transform",
    "verbose",
}


def link_sklearn_references(app, env, node, contnode):
    """Resolve the scikit-learn labels and terms above to scikit-learn.org."""
    if node.get("refdomain") != "std":
        return None
    target = node.get("reftarget")
    if node.get("reftype") == "ref" and target in SKLEARN_LABELS:
        page, title = SKLEARN_LABELS[target]
        text = contnode.astext() if node.get("refexplicit") else title
    elif node.get("reftype") == "term" and target in SKLEARN_TERMS:
        page, text = f"glossary.html#term-{target}", contnode.astext()
    else:
        return None
    return nodes.reference(text, text, internal=False, refuri=SKLEARN_URL + page)


def setup(app):
    app.connect("missing-reference", link_sklearn_references)


# -- sphinx-gallery ----------------------------------------------------------

sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    # Every plot_*.py example is executed during the build.
    "filename_pattern": r"/plot_",
    "ignore_pattern": r"__init__\.py",
    "download_all_examples": False,
    "backreferences_dir": "generated",
    "doc_module": ("skprivfact",),
    "remove_config_comments": True,
    "within_subsection_order": "sphinx_gallery.sorting.FileNameSortKey",
    "abort_on_example_error": True,
}

# -- HTML ------------------------------------------------------------------------

html_theme = "pydata_sphinx_theme"
html_title = f"skprivfact {release}"
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_show_sourcelink = False
html_static_path = []
