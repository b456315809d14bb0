"""``payoff``: does speculative decoding pay on this deployment, and what would pay better.

Order of work: ``scrape`` reads a server's Prometheus counters (prometheus_client's parser) or a
saved scrape, ``logline`` reads vLLM's SpecDecoding log lines instead; ``window`` takes the
difference of two readings; ``measure`` takes the server's window and the baseline's, each read
one way (a URL, saved scrapes or a log); ``analysis`` turns a window (and a baseline server's window, when
given) into acceptance figures, both measured speed ratios and a verdict, judged by ``judge``
(one class for every figure, or ``unknown``; a shorter draft only a range between two cost
models); ``run`` drives it, ``--watch`` too (the command line renders it:
``cli/render/payoff_report``, and draws its ``--plot``: ``cli/render/plot``); ``bench`` drives
vLLM's own benchmark client (``bench_client``, run in the target's interpreter;
``serving.client`` starts it) against two servers, and ``stall`` stops a load whose server
generates nothing. The sweep over k, which leans on ``bench``, is a folder of its own
(``vllm_patcher.sweep``).
"""
