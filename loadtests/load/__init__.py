"""The load itself, inside Locust: the users (raw SSE and the OpenAI SDK), the per-run state they
reach from Locust's environment (``state``), open-loop arrival schedules, and the one-time costs
paid before a test so the event loop stays free (``loop_hygiene``, ``failure_cycles``,
``gevent_compat``).

May import: ``declare`` and every layer below it.
"""
