"""Knowledge edits and their ripple effects: which implications of a taught fact move, read before the fact is taught.

`lincorr.ripple.edits` reads RippleEdits-shaped files (the bundled subset of RippleEdits, or a user's) as plain data.
"""

from lincorr.ripple.edits import COUNTRY_RELATIONS, EDITS_FILE, Edit, Problem, Query, read_edits, relation_counts

__all__ = ["COUNTRY_RELATIONS", "EDITS_FILE", "Edit", "Problem", "Query", "read_edits", "relation_counts"]
