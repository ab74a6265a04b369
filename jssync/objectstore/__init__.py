"""Layer 3 (Object store), built on the JetStream layer (and the Key/Value layer's bucket helpers)."""
