"""POST /order: a row and a push in one transaction (rolled back when asked)."""

from django.urls import path
from orders.views import order

urlpatterns = [path("order", order)]
