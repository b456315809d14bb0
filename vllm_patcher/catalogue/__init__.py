"""The catalogue of patches: the model (``model``; a family backport's description, its
patch.toml's ``[family]``: ``family``), read from its folders (``folders``) and
written by one writer (``writer``: patch.toml, series, pins), laid out per release (``layout``);
which releases the tool handles (``support``) and what the built-in pins say about vLLM's own
files (``shipped``), both derived from the folders; which patches a target model's family needs
(``targets``)."""
