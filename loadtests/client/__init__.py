"""One stream on the wire, without Locust: the SSE parser and its frames, the kernel's receive
stamps, every raw body read through one epoll, TLS, how a stream ended (``Outcome``, a request's
row), what the SDK hides (the wire tap), and the pre-flight check of a host.

May import: ``services``, ``base``, ``loadtests.errors``.
"""
