"""A run's tables to a verdict: ``Gate`` and every shipped gate, why requests failed on the way
(``causes``), drift over a soak's windows, and ``Summary``, the only reader and writer of
summary.json.

May import: ``record``, ``client``, ``services``, ``base``, ``loadtests.errors``.
"""
