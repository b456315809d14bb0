"""``payoff``: does speculative decoding pay on this deployment, and what would pay better.

Order of work: ``scrape`` reads a server's Prometheus counters (prometheus_client's parser) or a
saved scrape, ``logline`` reads vLLM's SpecDecoding log lines instead; ``window`` takes the
difference of two readings; ``analysis`` turns a window (and a baseline server's window, when
given) into acceptance figures, a fitted per-step cost, the expected speedup for every shorter
draft and a verdict; ``report`` renders it; ``bench`` drives vLLM's own benchmark client against
two servers; ``plot`` draws it (matplotlib, an optional extra).
"""
