"""Queries and candidates in one file, each query naming its gold candidates (Mewsli-X, LAReQA).

A dual encoder trained on (query, gold candidate) pairs ranks the candidates: features
data/ranking_inputs.py, head models/dual_encoder.py, scoring evaluation/pool_ranking.py."""

from workflow_scripts.spec.formats import TaskFormat

FORMAT = TaskFormat(
    name="ranking",
    columns={"side": "string", "text": "string", "context": "string", "gold": "list<string>"},
    head="ranking",
    scorer="ranking",
    options=("max_query_length", "lowercase", "pooling"),
)
