"""torchcontracts.core.nbio: nbformat without jsonschema's optional IRI grammars, and with its validation intact."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import sys
from torchcontracts.core.nbio import nbformat
skipped = "rfc3987_syntax" not in sys.modules
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
nbformat.validate(nb)
nb.cells[0]["cell_type"] = "not-a-cell-type"
try:
    nbformat.validate(nb)
    rejected = False
except nbformat.ValidationError:
    rejected = True
import rfc3987_syntax  # an explicit import still works afterwards
print(skipped, rejected)
"""


def test_nbformat_skips_the_optional_grammar_package_and_still_rejects_a_bad_notebook():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True"]


def test_a_process_that_already_imported_jsonschema_keeps_its_iri_checker():
    script = (
        "import jsonschema, sys\nfrom torchcontracts.core.nbio import nbformat\nprint('rfc3987_syntax' in sys.modules)"
    )
    assert (
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.strip()
        == "True"
    )
