"""The estimators' docstrings: shared paragraphs written once, filled in, valid numpydoc."""

import inspect
from pathlib import Path

import pytest

import skbayes_sg
from skbayes_sg._docstrings import ATTRIBUTES, PARAMETERS, fill_docstring

ESTIMATORS = [
    "SGBayesLogisticRegression",
    "SGBayesLinearRegression",
    "SGBayesPoissonRegressor",
    "SGBayesDRBMClassifier",
]


@pytest.mark.parametrize("name", ESTIMATORS)
def test_rendered_docstrings_are_numpydoc_and_document_every_parameter(name):
    docscrape = pytest.importorskip("numpydoc.docscrape")
    cls = getattr(skbayes_sg, name)
    assert "{" + "sampler}" not in cls.__doc__
    doc = docscrape.ClassDoc(cls)
    documented = [p.name for p in doc["Parameters"]]
    assert sorted(documented) == sorted(inspect.signature(cls).parameters)
    assert all(p.desc for p in doc["Parameters"])
    assert {"samples_", "diagnostics_", "n_iter_"} <= {a.name for a in doc["Attributes"]}


def test_shared_paragraphs_are_written_once_in_the_package():
    package = Path(skbayes_sg.__file__).parent
    sources = {p: p.read_text() for p in package.rglob("*.py") if p.name != "_docstrings.py"}
    for name, text in {**PARAMETERS, **ATTRIBUTES}.items():
        # The description, whatever its indentation: a paragraph that only starts alike (the
        # DRBM's own batch_size) is not a copy.
        words = " ".join(text.split()[3:])
        if len(words) < 100:
            continue  # a one-line attribute, as its property's own docstring says it
        copies = [p.name for p, s in sources.items() if words in " ".join(s.split())]
        assert not copies, f"the {name} paragraph is copied in {copies}"


def test_an_unknown_placeholder_is_an_error():
    class Est:
        """Doc.

        Parameters
        ----------
        {no_such_parameter}
        """

    with pytest.raises(KeyError, match="no_such_parameter"):
        fill_docstring(Est)
