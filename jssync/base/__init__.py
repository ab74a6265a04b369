"""Layer 0 (base): errors, deadlines, status-header parsing, ack-subject parsing. Imports nothing of jssync."""
