"""Prometheus metrics of ctld: the scrape, who may scrape, the counters kept over time,
power saving's series, the text format.

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
