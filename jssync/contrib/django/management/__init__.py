"""The management commands of the ``jssync.contrib.django`` app."""
