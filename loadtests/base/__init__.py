"""What every layer may use, and which imports nothing of the harness: text shown to a person
(``safe_text``), loopback ports (``ports``), the lines a run prints (``lines``), and how a declaration
where Locust runs reaches the run controller (``locust_entry``: by name, at run time, the one
reference to a stage above).

May import: ``loadtests.errors`` only.
"""
