"""The tests of jssync.contrib.django, run by Django's test runner against a real nats-server."""
