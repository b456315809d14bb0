"""``load``: the same load on vLLM servers, driven by vLLM's own benchmark client (``vllm bench
serve``, run in the target interpreter; ``serving.client`` starts it), and what its runs say.

``vllm_bench`` checks the client's arguments with its own parser, builds one run's arguments and
runs it once (its result file read), watched by ``stall`` (a server whose tokens stand still
stops the load); ``point`` holds one concurrency's runs on a speculative and a plain server
(``Run``, ``Point``: both measures, their spread and the verdict, judged by ``payoff.judge``);
``repeats`` reads the repeats together (windows merged, failed requests, a server's own noise);
``engine`` is the one measuring loop (a warm-up, then every server's runs between scrapes of its
/metrics, per concurrency and repeat) that ``bench`` drives with two servers at once for ``payoff
bench``, and ``payoff sweep`` (``vllm_patcher.sweep``) with each server it starts.
"""
