import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

import wurk

from .jobs import ship_order
from .models import Order
from .tasks import add


class OutOfStock(Exception):
    pass


def _queued() -> int:
    """What Redis holds right now (the view reports it from inside its transaction)."""
    config = wurk.default_config()
    return int(config.pool("client").run(lambda r: r.llen(config.keys.queue("default"))))


@csrf_exempt
def create_order(request: HttpRequest) -> JsonResponse:
    try:
        with transaction.atomic():
            order = Order.objects.create(item=request.POST["item"])
            jid = ship_order.perform_async(order.id)
            queued_inside = _queued()
            if request.POST.get("out_of_stock"):
                raise OutOfStock(order.item)
    except OutOfStock:
        return JsonResponse({"error": "out of stock", "queued_inside": queued_inside},
                            status=409)
    return JsonResponse({"order": order.id, "jid": jid, "queued_inside": queued_inside})


@csrf_exempt
def compute_view(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body)
    result = add.enqueue(body["a"], body["b"])
    return JsonResponse({"result_id": result.id, "status": str(result.status)})


@csrf_exempt
async def compute_async_view(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body)
    result = await add.aenqueue(body["a"], body["b"])
    return JsonResponse({"result_id": result.id})

