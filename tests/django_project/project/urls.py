from django.urls import path

from jssync.contrib.django import views

urlpatterns = [
    path("healthz/", views.health, name="health"),
]
