"""``nbformat``, imported without the one optional dependency that makes it slow to import.

``nbformat`` validates notebooks with ``jsonschema``, and ``jsonschema`` registers an ``"iri"`` format
checker if ``rfc3987_syntax`` is installed (it is, via ``jupyter_events``). Importing that package
compiles 39 Lark grammars: about 1.8 of the 2.0 s ``import nbformat`` took on the course's 2-core
machine, in every grader, ledger and site process. The notebook schema uses no ``"iri"`` format, so
validation is unchanged without it. The block applies only when ``jsonschema`` is not imported yet
(a process that already has the checker keeps it), and only to this optional import.
"""

from __future__ import annotations

import sys

if "jsonschema" not in sys.modules and "rfc3987_syntax" not in sys.modules:
    sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]  # makes jsonschema skip its optional "iri" check
    try:
        import nbformat
    finally:
        del sys.modules["rfc3987_syntax"]  # a later, explicit import of the package still works
else:
    import nbformat

__all__ = ["nbformat"]
