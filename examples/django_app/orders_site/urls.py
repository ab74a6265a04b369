from django.urls import path
from orders import views

urlpatterns = [
    path("orders/", views.publish_order, name="publish-order"),
]
