"""The catalogue of patches: the model (``model``), read from its folders (``folders``), laid out
per release (``layout``)."""
