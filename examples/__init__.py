"""Runnable examples; each has ``build()``, a NumPy ``reference`` and ``main()``."""
