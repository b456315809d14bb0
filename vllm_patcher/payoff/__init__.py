"""``payoff``: does speculative decoding pay on this deployment, and what would pay better.

Order of work: ``scrape`` reads a server's Prometheus counters (prometheus_client's parser) or a
saved scrape, ``logline`` reads vLLM's SpecDecoding log lines instead; ``window`` takes the
difference of two readings; ``analysis`` turns a window (and a baseline server's window, when
given) into acceptance figures, both measured speed ratios and a verdict, judged by ``judge``
(one class for every figure, or ``unknown``; a shorter draft only a range between two cost
models); ``report`` renders it; ``run`` drives it (and ``--watch``); ``bench`` drives vLLM's own
benchmark client against two servers; ``plot`` draws it (matplotlib, an optional extra).
"""
