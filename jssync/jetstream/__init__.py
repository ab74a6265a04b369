"""Layer 2 (JetStream): the context, streams, consumers, pull/push/ordered consumers, Direct Get, publishing."""
