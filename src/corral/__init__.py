"""corral's shared kernel: wire contract, config, identity, formats, test harness.

Kept import-light: the short-lived commands import parts of it on every call.
"""

__version__ = "1.1.0"
