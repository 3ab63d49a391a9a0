from django.urls import include, path
from shop import views

urlpatterns = [
    path("orders", views.create_order),
    path("compute", views.compute_view),
    path("compute-async", views.compute_async_view),
    path("wurk/", include("wurk.contrib.django.urls")),
]
