"""``sweep``: does speculation pay at each k, measured: the user's own ``vllm serve`` started at each
k (``serving``), the same load at each concurrency through vLLM's own benchmark client
(``load``), each cell judged from the server's counters (``payoff``).

``run`` plans a sweep, checks it before any server starts, and drives it (the baseline measured
again at the end); ``result`` holds what it found: every cell, each server's start or failure, and
the best k, judged only from runs that can be trusted."""
