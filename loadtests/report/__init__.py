"""A judged run shown to a person: report.html and requests.csv (``html_report``), and one run
against another (``compare``).

May import: ``judge``, ``record``, ``client``, ``services``, ``base``, ``loadtests.errors``.
"""
