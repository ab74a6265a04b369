"""Layer 3 (Key/Value store), built on the JetStream layer."""
