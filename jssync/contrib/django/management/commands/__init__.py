"""``jssync_consume``: see :mod:`jssync.contrib.django.management.commands.jssync_consume`."""
