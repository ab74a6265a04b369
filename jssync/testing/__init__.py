"""Testing support: nats-server processes and clusters (``jssync.server``) and the pytest plugin."""
