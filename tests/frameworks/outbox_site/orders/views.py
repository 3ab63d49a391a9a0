"""``POST /order?n=N[&rollback=1]``: the order's row and its job's push, in one transaction."""

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from .jobs import ship
from .models import Order


class RolledBack(Exception):
    pass


@csrf_exempt
def order(request: HttpRequest) -> JsonResponse:
    number = int(request.GET["n"])
    try:
        with transaction.atomic():
            Order.objects.create(number=number)
            jid = ship.perform_async(number)
            if request.GET.get("rollback"):
                raise RolledBack
    except RolledBack:
        return JsonResponse({"n": number, "committed": False, "jid": jid}, status=409)
    return JsonResponse({"n": number, "committed": True, "jid": jid})
