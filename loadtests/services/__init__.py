"""The services under test and beside it, as child processes on loopback: the bundled server and
the stack around it (``stack``), the embedded proxy and the real proxies, real vLLM, the LiteLLM
gateway, the tool environments they install into, and the watch that stops a child when its parent
dies.

May import: ``base``, ``loadtests.errors`` and ``sse_soak_lifeline`` (the process protocol shared
with the bundled server). Never the stages that load, record or judge.
"""
