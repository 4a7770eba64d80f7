"""ctld: the corral controller daemon (queue, state machine, store, scheduler, RPC)."""
