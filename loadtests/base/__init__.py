"""What every layer may use, and which imports nothing of the harness: text shown to a person
(``safe_text``), loopback ports (``ports``), the lines a run prints (``lines``).

May import: ``loadtests.errors`` only.
"""
