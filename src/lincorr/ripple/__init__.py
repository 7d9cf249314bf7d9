"""Knowledge edits and their ripple effects: which implications of a taught fact move, read before the fact is taught.

`lincorr.ripple.edits` reads RippleEdits-shaped files (the bundled subset of RippleEdits, or a user's) as plain data;
`hops` turns each query of a country edit into templates and answer domains; `predictors` reads each query before its
edit (the prior, W, GradSim, CLaRE-style similarity); `outcomes` makes the edit on a copy of the model and asks again;
`benchmark` scores the predictors on what moved, clustered by edit; `study.measure_ripple` composes them
(`lincorr ripple`).
"""

from lincorr.ripple.edits import COUNTRY_RELATIONS, EDITS_FILE, Edit, Problem, Query, read_edits, relation_counts
from lincorr.ripple.study import RippleConfig, RippleResult, measure_ripple

__all__ = ["COUNTRY_RELATIONS", "EDITS_FILE", "Edit", "Problem", "Query", "RippleConfig", "RippleResult", "measure_ripple",
           "read_edits", "relation_counts"]
