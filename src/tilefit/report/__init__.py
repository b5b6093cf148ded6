"""`tilefit report`: pictures of what tilefit knows, as one self-contained HTML page (and PNGs).

A ReportRequest (a deployment and/or recorded results) -> build.py reads and models it into
sections of typed figure data (data.py, no plotting library) -> figures.py draws each with
matplotlib (the `tilefit[report]` extra, imported only here) -> html.py inlines them as SVG.
"""

# Defaults that `tilefit report --help` prints; kept here so that building the CLI parser imports
# nothing else of the report.
DEFAULT_ARCHS = ("sm89", "sm90", "sm120")
# Powers of two from 1 to 4096 tokens: enough points to place a TP/EP crossover.
CURVE_BATCHES = tuple(2 ** i for i in range(13))
