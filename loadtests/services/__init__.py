"""The services under test and beside it, as child processes on loopback: the bundled server and
the stack around it (``stack``), the proxy kinds ``--proxy`` names, one module each with their
registry (``proxies``: none, the embedded proxy, the real ones, the LiteLLM gateway), real vLLM, the
tool environments they install into, the child process they all are (``child``), and the watch that
stops a child when its parent dies.

May import: ``base``, ``loadtests.errors`` and ``sse_soak_lifeline`` (the process protocol shared
with the bundled server). Never the stages that load, record or judge.
"""
