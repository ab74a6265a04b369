from django.apps import AppConfig


class ConsumerappConfig(AppConfig):
    name = "consumerapp"
