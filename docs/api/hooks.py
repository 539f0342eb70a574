"""MkDocs hook: the docstrings cross-reference in Sphinx roles (``:func:`recipe```,
``:class:`~bayes_scaling.laws.Law```), which mkdocstrings renders literally; show them as code,
the ``~`` form by its last component, as Sphinx would."""
import re

ROLE = re.compile(r":(?:func|class|meth|mod|data|attr|exc|obj):<code>(~?)([^<]*)</code>")


def _code(m):
    name = m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2)
    return f"<code>{name}</code>"


def on_page_content(html, page, config, files):
    return ROLE.sub(_code, html)
