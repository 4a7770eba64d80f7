"""The transports and handlers: gRPC and the HTTP/JSON gateway, who the caller is,
connections before the caller is known, the listeners' role switch, and the handlers'
adapters from requests to the controller's operations.

Its place among ctld's layers, and what it may import: docs/architecture.md,
"ctld's folders" (held by tests/unit/test_ctld_layers.py).
"""
