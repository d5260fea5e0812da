"""The history's page: one self-contained HTML file, regressions first, then each series' trends."""

from __future__ import annotations
