"""What a run keeps: rows and frames in shippable batches (``recorder``), the harness's loop lag,
the server's scraped metrics, the run directory and its parquet parts, which workers belong to the
run (``membership``), and the figures every reader computes the same way (``figures``).

May import: ``client``, ``services``, ``base``, ``loadtests.errors``.
"""
