"""Integrations with web and task frameworks (optional extras): ``jssync.contrib.django``."""
