"""What a user writes and chooses: ``Scenario`` (profile, proxy, gates), every option declared
once (``options``), the request mixes and prompts (``workload``), the shipped scenarios by name
(``catalog``).

May import: ``report``, ``judge``, ``record``, ``client``, ``services``, ``base``,
``loadtests.errors``.
"""
