"""One run from its options to its exit code: the Locust run controller, rows collected from
workers, the judging of a run directory (``judging``), signals and the closing lines, a headless
run in a child process (``child_run``), the nightly soak and its watchers, and the web UI's tab.

May import: ``load`` and every layer below it.
"""
