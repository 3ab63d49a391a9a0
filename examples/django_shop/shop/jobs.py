"""wurk jobs of the shop app: ``manage.py wurk`` loads this module by itself."""

import wurk

from .models import Order


@wurk.job
def ship_order(order_id: int) -> None:
    # The row is there: the push waited for the transaction that created it to commit.
    Order.objects.filter(id=order_id).update(shipped=True)
