"""The command line, ``python -m loadtests`` (``sse-soak``): its subcommands, the rendered option
docs and the Kubernetes manifests.

May import: every layer.
"""
