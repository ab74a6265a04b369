"""Layer 1 (core NATS): the I/O loop, the nats-py adapter, messages, subscriptions, workers, the connection."""
