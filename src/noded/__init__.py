"""noded: the corral node agent (discovery, registration, launching, reporting)."""
