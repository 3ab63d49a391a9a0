"""A tiny FastAPI app using wurk: endpoints push jobs, an embedded worker runs them, the
dashboard is mounted at /wurk.

Run it: ``uvicorn fastapi_shop:create_app --factory`` (``FASTAPI_SHOP_WORKER=1`` runs the
worker inside the web process; otherwise run ``wurk -r fastapi_shop``).
"""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI
from pydantic import BaseModel

import wurk
from wurk.contrib.fastapi import Wurk


@wurk.job(name="FastShop::Receipt")
def send_receipt(order_id: int, email: str) -> None:
    outbox = Path(os.environ.get("FASTAPI_SHOP_OUTBOX", "outbox.txt"))
    with outbox.open("a") as file:
        file.write(f"receipt {order_id} to {email}\n")


class OrderIn(BaseModel):
    id: int
    email: str


def is_admin(request: object) -> bool:
    headers = getattr(request, "headers", {})
    return headers.get("x-admin-token") == os.environ.get("FASTAPI_SHOP_ADMIN_TOKEN", "")


def create_app(*, worker: bool | None = None) -> FastAPI:
    config = wurk.Config(concurrency=2, fetch_timeout=0.2, heartbeat_interval=1,
                         scheduler_initial_wait=0, timeout=5)
    run_worker = os.environ.get("FASTAPI_SHOP_WORKER") == "1" if worker is None else worker
    wurk_ext = Wurk(config, dashboard="/wurk", authorize=is_admin, worker=run_worker)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with wurk_ext.lifespan(app):  # wurk's inside the app's own
            yield
        await config.aclose()  # this app made the configuration: its Redis pools end with it

    app = FastAPI(lifespan=lifespan)
    receipts = send_receipt.set(config=config)  # the job, pushed through this app's config

    @app.post("/orders")
    # Annotations are evaluated here (no postponed evaluation in this module), so FastAPI
    # sees the dependency on this app's own extension object.
    async def create_order(order: OrderIn,
                           client: Annotated[wurk.Client, Depends(wurk_ext.client)]
                           ) -> dict[str, str | None]:
        # On redis-py's asyncio client: the loop serves other requests meanwhile.
        jid = await client.apush({"class": send_receipt.name,
                                  "args": [order.id, order.email]})
        return {"jid": jid}

    @app.post("/orders/{order_id}/resend")
    async def resend_receipt(order_id: int, email: str) -> dict[str, str | None]:
        return {"jid": await receipts.aperform_async(order_id, email)}

    return app
